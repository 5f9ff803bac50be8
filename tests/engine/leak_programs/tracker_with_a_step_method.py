"""A loss meter whose own method is named ``step`` keeps each loss with its graph."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class LossMeter:
    def __init__(self):
        self.values = []

    def step(self, value):
        self.values.append(value)

    def average(self):
        return torch.stack(self.values).mean().item()


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
batches = [(torch.randn(8, 6), torch.randn(8, 1))] * 6
meter = LossMeter()
for x, y in batches:
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    meter.step(loss)
print(meter.average())
