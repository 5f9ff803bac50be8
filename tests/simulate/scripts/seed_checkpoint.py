"""Seed: a checkpoint loaded to the CPU and mixed with the model's tensors."""

import os
import tempfile

import torch
import torch.nn as nn

device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Linear(4, 2).to(device)
path = os.path.join(tempfile.mkdtemp(), "ema.pt")
torch.save({"ema": model.state_dict()}, path)
ema = torch.load(path, map_location="cpu")["ema"]
with torch.no_grad():
    for name, param in model.named_parameters():
        param.mul_(0.9).add_(ema[name] * 0.1)  # BUG
