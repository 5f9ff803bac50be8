"""An nn.Sequential trained by SGD: its layers are children named "0", "1", ..."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 2), nn.ReLU(), nn.Linear(2, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4)
for _step in range(2):
    optimizer.zero_grad()  # line 11: the breakpoint line
    model(x).pow(2).mean().backward()
    optimizer.step()  # line 13: the parameters' write
print("done")
