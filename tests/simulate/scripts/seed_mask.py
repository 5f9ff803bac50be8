"""Seed: a CPU class-weight vector in the loss."""

import torch
import torch.nn as nn
import torch.nn.functional as F

device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Linear(4, 3).to(device)
class_weights = torch.tensor([1.0, 2.0, 0.5])
x = torch.randn(8, 4, device=device)
y = torch.randint(0, 3, (8,), device=device)
loss = F.cross_entropy(model(x), y, weight=class_weights)  # BUG
loss.backward()
