"""A DCGAN, modelled on pytorch/examples ``dcgan``: a transposed-conv generator, a conv
discriminator, ``BCELoss``, separate Adam optimizers, ``fake.detach()`` for the discriminator
step and ``netG.zero_grad()`` before the generator step.

Bug variants (first argument):
- ``zero-grad-wrong-net``: the generator step calls ``netD.zero_grad()`` (copy-paste from the
  discriminator step), so ``netG``'s gradients are never cleared.
- ``label-on-cpu``: ``torch.full((b_size,), real_label)`` without ``device=``.
"""

import sys

import torch
import torch.nn as nn

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""
NZ, NGF, NDF = 8, 8, 8


def weights_init(m: nn.Module) -> None:
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)


class Generator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(NZ, NGF * 2, 4, 1, 0, bias=False),
            nn.BatchNorm2d(NGF * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(NGF * 2, NGF, 4, 2, 1, bias=False),
            nn.BatchNorm2d(NGF),
            nn.ReLU(True),
            nn.ConvTranspose2d(NGF, 1, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(1, NDF, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF, NDF * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(NDF * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF * 2, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    dataset = torch.tanh(torch.randn(64, 1, 16, 16).cumsum(dim=-1) / 4)
    netG, netD = Generator().to(device), Discriminator().to(device)
    netG.apply(weights_init)
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    real_label, fake_label = 1.0, 0.0
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))

    for epoch in range(2):
        for i in range(0, len(dataset), 16):
            # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
            netD.zero_grad()
            real_cpu = dataset[i : i + 16].to(device)
            b_size = real_cpu.size(0)
            if BUG == "label-on-cpu":
                label = torch.full((b_size,), real_label)
            else:
                label = torch.full((b_size,), real_label, dtype=real_cpu.dtype, device=device)
            output = netD(real_cpu)
            errD_real = criterion(output, label)  # bug[label-on-cpu]: device-mismatch
            errD_real.backward()
            noise = torch.randn(b_size, NZ, 1, 1, device=device)
            if BUG == "generator-under-no-grad":
                with torch.no_grad():  # bug[generator-under-no-grad]: grad-lost
                    fake = netG(noise)
            else:
                fake = netG(noise)
            label.fill_(fake_label)
            output = netD(fake.detach())
            errD_fake = criterion(output, label)
            errD_fake.backward()
            errD = errD_real + errD_fake
            optimizerD.step()
            # (2) Update G network: maximize log(D(G(z)))
            if BUG == "zero-grad-wrong-net":
                netD.zero_grad()
            else:
                netG.zero_grad()
            label.fill_(real_label)
            output = netD(fake)
            errG = criterion(output, label)
            errG.backward()
            optimizerG.step()  # bug[zero-grad-wrong-net]: missing-zero-grad
        print(f"[{epoch}/2] Loss_D: {errD.item():.4f} Loss_G: {errG.item():.4f}")


if __name__ == "__main__":
    main()
