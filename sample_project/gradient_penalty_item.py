"""A WGAN-GP critic whose gradient penalty comes back as a Python number: it never penalises.

`gradient_penalty()` takes the critic's gradients with `create_graph=True`, so that the
critic's `backward()` can go through them, and then returns `.item()` of the penalty ("a
number for the log line"). `d_loss = ... + 10 * gp` adds a constant: the critic's gradients
are never kept near norm 1, and nothing says so. The finding is at the `.item()` line; the
debugger pauses at the critic's `opt_d.step()` (`# pauses:`), by which no backward() went
through the penalty.
"""

import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)

generator = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
critic = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
opt_d = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.5, 0.9))


def gradient_penalty(real, fake):
    alpha = torch.rand(real.size(0), 1, device=device)
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    scores = critic(mixed)
    grads = torch.autograd.grad(scores, mixed, torch.ones_like(scores), create_graph=True)[0]
    return ((grads.norm(2, dim=1) - 1) ** 2).mean().item()  # expect: grad-lost


for _step in range(20):
    real = torch.randn(64, 2, device=device) * 0.5 + 1.0
    fake = generator(torch.randn(64, 8, device=device)).detach()
    gp = gradient_penalty(real, fake)
    d_loss = critic(fake).mean() - critic(real).mean() + 10 * gp
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()  # pauses: grad-lost
print(f"d_loss {d_loss.item():.4f} gp {gp:.4f}")
