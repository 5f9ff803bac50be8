"""Clean: GAN training steps; the checker must report nothing.

The discriminator learns from `fake.detach()` (its loss must not reach the generator), then the
generator learns from `fake` itself. Gradients are cleared with `module.zero_grad()`, as in the
PyTorch DCGAN tutorial; the discriminator's gradients left over from the generator step are
cleared before the next discriminator step.
"""

import torch
import torch.nn as nn

from tensor_dap.testing import pick_device

device = pick_device()
torch.manual_seed(0)

latent, data_dim, batch = 8, 16, 32
generator = nn.Sequential(nn.Linear(latent, 32), nn.ReLU(), nn.Linear(32, data_dim)).to(device)
discriminator = nn.Sequential(nn.Linear(data_dim, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1)).to(
    device
)
criterion = nn.BCEWithLogitsLoss()
opt_g = torch.optim.Adam(generator.parameters(), lr=2e-3, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(discriminator.parameters(), lr=2e-3, betas=(0.5, 0.999))
real_label = torch.ones(batch, 1, device=device)
fake_label = torch.zeros(batch, 1, device=device)

for step in range(10):
    real = torch.randn(batch, data_dim, device=device) * 0.5 + 1.0
    fake = generator(torch.randn(batch, latent, device=device))

    discriminator.zero_grad()
    loss_d_real = criterion(discriminator(real), real_label)
    loss_d_real.backward()
    loss_d_fake = criterion(discriminator(fake.detach()), fake_label)
    loss_d_fake.backward()
    opt_d.step()

    generator.zero_grad()
    loss_g = criterion(discriminator(fake), real_label)
    loss_g.backward()
    opt_g.step()

    if step % 3 == 0:
        loss_d = loss_d_real.item() + loss_d_fake.item()
        print(f"step {step}: D {loss_d:.4f} G {loss_g.item():.4f}")
