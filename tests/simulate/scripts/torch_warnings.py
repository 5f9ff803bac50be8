"""Warnings PyTorch's C++ raises name the program's lines, as on a GPU (the "once per location"
filter shows the second copy warning too: it is another line)."""

import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(4, 1).to(device)
x = torch.randn(8, 4, device=device)
loss = model(x).pow(2).mean()
value = float(loss)
copy = torch.tensor(x)
again = torch.tensor(loss)
print("OK")
