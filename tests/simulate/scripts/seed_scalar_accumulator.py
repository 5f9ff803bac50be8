"""Seed: a 0-dim loss accumulator made on the CPU, added to in place: a GPU refuses to write
into a CPU scalar (it rides along with device tensors as an input only)."""

import torch
import torch.nn as nn

device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
running_loss = torch.tensor(0.0)
for _step in range(3):
    x = torch.randn(8, 4, device=device)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    running_loss += loss.detach()  # BUG
print(running_loss / 3)
