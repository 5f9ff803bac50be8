"""Contrastive-divergence EBM (IGEBM-style) with short-run Langevin negatives, an energy magnitude regularizer
and a gradient-norm penalty on real data to smooth the energy landscape."""

import torch
import torch.nn as nn

torch.manual_seed(0)

E = nn.Sequential(nn.Linear(2, 64), nn.SiLU(), nn.Linear(64, 64), nn.SiLU(), nn.Linear(64, 1))
opt = torch.optim.Adam(E.parameters(), lr=1e-3, betas=(0.0, 0.999))
alpha_reg, gp_weight = 0.1, 0.5
langevin_steps, step_size, noise = 10, 0.05, 0.01


def sample_langevin(x):
    x = x.clone().detach().requires_grad_(True)
    for _ in range(langevin_steps):
        grad_x = torch.autograd.grad(E(x).sum(), x)[0]
        x = (x - step_size * grad_x + noise * torch.randn_like(x)).detach().requires_grad_(True)
    return x.detach()


def regularizers(x_pos, e_pos, e_neg):
    grad_pos = torch.autograd.grad(e_pos.sum(), x_pos, create_graph=True)[0]
    gp = grad_pos.pow(2).sum(1).mean()
    energy_reg = (e_pos**2 + e_neg**2).mean()
    return energy_reg, gp.item()  # BUG


buffer = torch.rand(256, 2) * 4 - 2
for it in range(30):
    x_pos = (torch.randn(64, 2) * 0.3 + torch.tensor([1.0, -1.0])).requires_grad_(True)
    idx = torch.randint(0, buffer.shape[0], (64,))
    x_neg = sample_langevin(buffer[idx])
    buffer[idx] = x_neg

    e_pos, e_neg = E(x_pos), E(x_neg)
    cd_loss = e_pos.mean() - e_neg.mean()
    energy_reg, gp = regularizers(x_pos, e_pos, e_neg)
    loss = cd_loss + alpha_reg * energy_reg + gp_weight * gp
    opt.zero_grad()
    loss.backward()
    opt.step()
    if it % 5 == 0:
        print(
            f"it {it:02d} loss {loss.item():.4f} cd {cd_loss.item():.4f} e_reg {energy_reg.item():.4f} gp {gp:.4f}"
        )
