"""Clean: 0-dim CPU tensors and Python numbers beside accelerator tensors; nothing to report.

PyTorch lets CPU scalars (0-dim tensors) take part in device ops, as it does Python numbers;
a bias (10,) added to (64, 10) and an explicit outer product `a[:, None] * b[None, :]`
broadcast on purpose; inputs are moved with `.to(device)`.
"""

import torch
import torch.nn as nn

from tensor_dap.testing import pick_device

device = pick_device()
torch.manual_seed(0)

features = torch.randn(64, 32).to(device)
weight = torch.randn(32, 10, device=device)
bias = torch.randn(10, device=device)
lr = 0.01
scale = torch.tensor(0.5)  # a CPU scalar
floor = torch.tensor(0.0)  # a CPU scalar

logits = features @ weight + bias  # (64, 10) + (10,)
scaled = logits * scale
shifted = scaled + lr
clamped = torch.clamp(shifted, min=floor)
a = torch.arange(4.0, device=device)
b = torch.arange(3.0, device=device)
outer = a[:, None] * b[None, :]  # (4, 1) * (1, 3): an outer product on purpose

layer = nn.Linear(10, 1).to(device)
with torch.no_grad():
    layer.weight.mul_(scale)
    layer.bias.add_(floor)
out = layer(clamped)
print(f"mean output {out.mean().item():.4f}, outer sum {outer.sum().item():.1f}")
print(f"clamped min {clamped.min().item():.4f} (>= 0)")
