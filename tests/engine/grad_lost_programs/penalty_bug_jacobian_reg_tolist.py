"""Autoencoder with a contractive (Jacobian Frobenius-norm) penalty estimated per sample via random projections."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

encoder = nn.Sequential(nn.Linear(12, 32), nn.Sigmoid(), nn.Linear(32, 4))
decoder = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 12))
opt = torch.optim.Adam(list(encoder.parameters()) + list(decoder.parameters()), lr=3e-3)
beta = 0.05
n_proj = 2


def jacobian_norms(x, z, n_proj=1):
    """Per-sample Hutchinson-style estimate of ||dz/dx||_F^2."""
    total = torch.zeros(x.shape[0])
    for _ in range(n_proj):
        v = torch.randn_like(z)
        (vjp,) = torch.autograd.grad(z, x, grad_outputs=v, create_graph=True, retain_graph=True)
        total = total + vjp.pow(2).sum(dim=1)
    return total / n_proj


history = []
data = torch.randn(400, 4) @ torch.randn(4, 12)
for step in range(50):
    x = data[torch.randint(0, 400, (40,))].clone().requires_grad_(True)
    z = encoder(x)
    recon = decoder(z)
    rec_loss = F.mse_loss(recon, x.detach())
    per_sample = jacobian_norms(x, z, n_proj).tolist()  # BUG
    contractive = sum(per_sample) / len(per_sample)
    loss = rec_loss + beta * contractive
    opt.zero_grad()
    loss.backward()
    opt.step()
    history.append(dict(rec=rec_loss.item(), jac=contractive, loss=loss.item()))
    if step % 10 == 0:
        print(
            "step {:3d}: rec {rec:.4f}  jac {jac:.4f}  loss {loss:.4f}".format(step, **history[-1])
        )
