"""Multi-task learning with GradNorm (Chen et al. 2018), from a helper's program: a shared
trunk, two heads, learnable task weights trained on the gap between each task's gradient norm
at the last shared layer and its target. After each step the weights are renormalized to sum
to the number of tasks; written as a new Parameter (`--remade`, the bug: opt_w keeps stepping
the first one, which no forward uses any more) or in place (right)."""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
N = 256
X = torch.randn(N, 10)
y_reg = X[:, :5].sum(1, keepdim=True) * 3.0
y_cls = (X[:, 5:].sum(1) > 0).long()


class MultiTask(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(10, 32), nn.ReLU())
        self.shared_last = nn.Linear(32, 32)
        self.reg_head = nn.Linear(32, 1)
        self.cls_head = nn.Linear(32, 2)

    def forward(self, x):
        h = F.relu(self.shared_last(self.trunk(x)))
        return self.reg_head(h), self.cls_head(h)


model = MultiTask()
task_w = nn.Parameter(torch.ones(2))
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
opt_w = torch.optim.Adam([task_w], lr=2e-2)
alpha = 1.5
initial_losses = None
for step in range(12):
    idx = torch.randint(0, N, (64,))
    pred_reg, pred_cls = model(X[idx])
    task_losses = torch.stack(
        [F.mse_loss(pred_reg, y_reg[idx]), F.cross_entropy(pred_cls, y_cls[idx])]
    )
    if initial_losses is None:
        initial_losses = task_losses.detach()
    weighted = (task_w * task_losses).sum()
    opt.zero_grad()
    weighted.backward(retain_graph=True)
    norms = []
    for i in range(2):
        (g,) = torch.autograd.grad(
            task_w[i] * task_losses[i],
            model.shared_last.weight,
            retain_graph=True,
            create_graph=True,
        )
        norms.append(g.norm())
    norms = torch.stack(norms)
    with torch.no_grad():
        ratio = task_losses / initial_losses
        target = norms.mean() * (ratio / ratio.mean()) ** alpha
    gradnorm_loss = (norms - target).abs().sum()
    opt_w.zero_grad()
    task_w.grad = torch.autograd.grad(gradnorm_loss, task_w)[0]
    opt.step()
    opt_w.step()
    if "--remade" in sys.argv:
        task_w = nn.Parameter((task_w / task_w.sum() * 2).detach())  # BUG
    else:
        with torch.no_grad():
            task_w.copy_(task_w / task_w.sum() * 2)
print(f"task weights {task_w[0].item():.3f} {task_w[1].item():.3f}")
