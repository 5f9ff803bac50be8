"""Allen-Cahn-like steady PINN: eps*u'' + u - u^3 = f on [-1, 1], u(+-1) = 0.
Loss terms are collected in a dict and summed; Adam then L-BFGS with a closure."""

import math

import torch
import torch.nn as nn

torch.manual_seed(0)
eps = 0.05


class MLP(nn.Module):
    def __init__(self, width=32, depth=3):
        super().__init__()
        layers, d = [], 1
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.Tanh()]
            d = width
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


model = MLP()
x_col = (torch.rand(256, 1) * 2 - 1).requires_grad_(True)
x_bnd = torch.tensor([[-1.0], [1.0]])
f_col = torch.sin(math.pi * x_col.detach())
weights = {"pde": 1.0, "bc": 10.0}


def compute_losses():
    u = model(x_col)
    du = torch.autograd.grad(u, x_col, torch.ones_like(u), create_graph=True)[0]
    d2u = torch.autograd.grad(du, x_col, torch.ones_like(du), create_graph=True)[0]
    res = eps * d2u + u - u**3 - f_col
    losses = {
        "pde": weights["pde"] * res.pow(2).mean().item(),  # BUG
        "bc": weights["bc"] * model(x_bnd).pow(2).mean(),
    }
    return losses


optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for it in range(40):
    losses = compute_losses()
    loss = sum(losses.values())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if it % 10 == 0:
        print(
            f"[Adam {it:3d}] total={loss.item():.4e} "
            + " ".join(f"{k}={float(v):.4e}" for k, v in losses.items())
        )

lbfgs = torch.optim.LBFGS(
    model.parameters(), lr=0.5, max_iter=20, history_size=20, line_search_fn="strong_wolfe"
)
step_log = []


def closure():
    lbfgs.zero_grad()
    losses = compute_losses()
    loss = sum(losses.values())
    loss.backward()
    step_log.append(loss.item())
    return loss


lbfgs.step(closure)
print(f"[LBFGS] {len(step_log)} evals, first={step_log[0]:.4e} last={step_log[-1]:.4e}")
