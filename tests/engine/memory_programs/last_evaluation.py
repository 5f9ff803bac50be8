"""Training, then evaluations with the model left in training mode and no torch.no_grad(): each
total keeps every batch's graph, and no backward() follows to say it is an evaluation."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
batches = [(torch.randn(8, 6), torch.randn(8, 1)) for _ in range(5)]
for x, y in batches:
    optimizer.zero_grad()
    F.mse_loss(model(x), y).backward()
    optimizer.step()


def test_loss() -> float:
    total = 0
    for x, y in batches:
        total += F.mse_loss(model(x), y)
    return total.item() / len(batches)


result = test_loss()
print(f"test loss {result:.3f}")

final = 0
for x, y in batches:
    final = final + F.l1_loss(model(x), y)
print(f"final error {final.item() / len(batches):.3f}")
