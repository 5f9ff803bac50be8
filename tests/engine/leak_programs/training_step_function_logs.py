"""A script's ``training_step`` function logs its loss through a module-level ``log`` helper
into a module-level dict of lists; the loop at module level calls backward()."""

from collections import defaultdict

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.Adam(model.parameters())
logged = defaultdict(list)


def log(name, value):
    logged[name].append(value)


def training_step(x, y):
    loss = F.cross_entropy(model(x), y)
    log("loss", loss)
    return loss


for _step in range(20):
    x, y = torch.randn(16, 10), torch.randint(0, 2, (16,))
    loss = training_step(x, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(len(logged["loss"]))
