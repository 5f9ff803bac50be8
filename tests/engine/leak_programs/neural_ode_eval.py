"""Neural ODE (Chen et al. 2018) fitted to a damped spiral with a hand-written fixed-step RK4
(written by a helper as a realistic program). The bug: every 10 iterations the whole trajectory
is evaluated with the model in eval mode but without ``torch.no_grad()``, and each trajectory is
kept in ``eval_trajs`` for a plot: each keeps its graph alive to the end. The solver's own list
``ys`` is temporary and training needs it; the fix is ``torch.no_grad()`` around the call.
"""

import torch
import torch.nn as nn

torch.manual_seed(0)

A_TRUE = torch.tensor([[-0.1, 2.0], [-2.0, -0.1]])
T = torch.linspace(0.0, 5.0, 50)


def true_f(t, y):
    return (y**3) @ A_TRUE


def rk4(f, y0, t):
    ys = [y0]
    y = y0
    for i in range(len(t) - 1):
        h = t[i + 1] - t[i]
        k1 = f(t[i], y)
        k2 = f(t[i] + h / 2, y + h / 2 * k1)
        k3 = f(t[i] + h / 2, y + h / 2 * k2)
        k4 = f(t[i] + h, y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        ys.append(y)
    return torch.stack(ys)  # (T, B, 2)


class ODEFunc(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 50), nn.Tanh(), nn.Linear(50, 2))
        self.nfe = 0

    def forward(self, t, y):
        self.nfe += 1
        return self.net(y**3)


with torch.no_grad():
    y0_true = torch.tensor([[2.0, 0.0]])
    true_traj = rk4(true_f, y0_true, T)  # (50, 1, 2)

func = ODEFunc()
opt = torch.optim.RMSprop(func.parameters(), lr=1e-3)
BATCH_T, BATCH = 10, 16
snapshots, eval_trajs = [], []
for itr in range(1, 31):
    s = torch.randint(0, len(T) - BATCH_T, (BATCH,))
    batch_y0 = true_traj[s, 0]  # (B, 2)
    batch_t = T[:BATCH_T]
    batch_y = torch.stack([true_traj[s + i, 0] for i in range(BATCH_T)])  # (T, B, 2)
    pred_y = rk4(func, batch_y0, batch_t)
    loss = torch.mean(torch.abs(pred_y - batch_y))
    opt.zero_grad()
    loss.backward()
    opt.step()
    snapshots.append(pred_y[:, 0].detach())
    if itr % 10 == 0:
        func.eval()
        full = rk4(func, y0_true, T)
        eval_trajs.append(full)
        func.train()
        mae = torch.mean(torch.abs(full - true_traj)).item()
        print(f"iter {itr:3d} loss {loss.item():.4f} full-traj MAE {mae:.4f}")
print("nfe", func.nfe, "snapshots", len(snapshots), tuple(snapshots[-1].shape))
