"""Summing per-batch losses into an accumulator that was created on the CPU.

`loss = torch.Tensor([0.0])` lives on the host while the model and data are on the GPU,
so the first `loss + criterion(...)` mixes devices. PyTorch raises at once: "RuntimeError:
Expected all tensors to be on the same device, but found at least two devices, cpu and cuda:0!"
(on a GPU, or under `tensor-dap check --simulate cuda` on the CPU).
"""

import torch
import torch.nn as nn

# without a GPU: tensor-dap check --simulate cuda sample_project/loss_accumulator_on_cpu.py

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to(device)
criterion = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
batches = [(torch.randn(16, 8, device=device), torch.randn(16, 1, device=device)) for _ in range(4)]

for x, y in batches:  # a first epoch, one step per batch
    optimizer.zero_grad()
    criterion(model(x), y).backward()
    optimizer.step()

optimizer.zero_grad()  # then one step on the loss summed over every batch
loss = torch.Tensor([0.0]).float()
for x, y in batches:
    loss = loss + criterion(model(x), y)  # expect: device-mismatch
loss.backward()
optimizer.step()
print(f"summed loss over {len(batches)} batches: {loss.item():.4f}")
