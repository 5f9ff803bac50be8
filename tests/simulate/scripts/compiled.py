"""Clean: a compiled model, a compiled function and a compiled decorator's function train."""

import torch
import torch.nn as nn


@torch.compile
def scaled(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@torch.compile(fullgraph=True)
def shifted(x: torch.Tensor) -> torch.Tensor:
    return x + 1


device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = torch.compile(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)).to(device))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    optimizer.zero_grad()
    loss = shifted(scaled(model(torch.randn(2, 4, device=device)))).sum()
    loss.backward()
    optimizer.step()
print(sorted(model.state_dict())[:2], type(model).__name__, "OK")
