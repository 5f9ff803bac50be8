"""Pinned host memory: DataLoader(pin_memory=True) and .pin_memory()."""

import torch
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
data = TensorDataset(torch.randn(16, 3), torch.randint(0, 2, (16,)))
loader = DataLoader(data, batch_size=4, pin_memory=True)
model = torch.nn.Linear(3, 2).to(device)
logits_host = torch.empty(4, 2, pin_memory=True)
for x, y in loader:
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits, y)
    loss.backward()
    logits_host.copy_(logits.detach(), non_blocking=True)  # expect: leaves-device
host = torch.randn(5).pin_memory()
moved = host.to(device, non_blocking=True)
assert moved.is_cuda
staged = torch.empty(5, pin_memory=True)
staged.copy_(moved)  # one copy after the loop: not reported
print("OK")
