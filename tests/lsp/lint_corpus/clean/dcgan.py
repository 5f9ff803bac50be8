"""The shape of pytorch/examples' dcgan/main.py: weights_init applied with .apply, the
discriminator and generator steps with fake.detach(), zero_grad before each backward."""

import torch
import torch.nn as nn


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        m.weight.data.normal_(1.0, 0.02)  # hint: data-write
        m.bias.data.fill_(0)  # hint: data-write


def train(netG, netD, dataloader, optimizerD, optimizerG, device, nz, niter):
    netG.apply(weights_init)
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(64, nz, 1, 1, device=device)
    real_label, fake_label = 1.0, 0.0
    for epoch in range(niter):
        for i, data in enumerate(dataloader, 0):
            netD.zero_grad()
            real_cpu = data[0].to(device)
            batch_size = real_cpu.size(0)
            label = torch.full((batch_size,), real_label, dtype=real_cpu.dtype, device=device)
            output = netD(real_cpu)
            errD_real = criterion(output, label)
            errD_real.backward()
            D_x = output.mean().item()

            noise = torch.randn(batch_size, nz, 1, 1, device=device)
            fake = netG(noise)  # (1) then update D with the fake batch
            label.fill_(fake_label)
            output = netD(fake.detach())
            errD_fake = criterion(output, label)
            errD_fake.backward()
            D_G_z1 = output.mean().item()
            errD = errD_real + errD_fake
            optimizerD.step()

            netG.zero_grad()
            label.fill_(real_label)
            output = netD(fake)
            errG = criterion(output, label)
            errG.backward()
            optimizerG.step()
            print(epoch, i, errD.item(), errG.item(), D_x, D_G_z1)
        with torch.no_grad():
            netG(fixed_noise)
        torch.save(netG.state_dict(), f"netG_epoch_{epoch}.pt")
