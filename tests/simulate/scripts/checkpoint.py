"""Saving a CUDA model and loading it back with map_location="cuda" or a device."""

import os
import tempfile

import torch
import torch.nn as nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(3, 2).to(device)
path = os.path.join(tempfile.mkdtemp(), "model.pt")
torch.save({"model": model.state_dict(), "step": 3}, path)
for where in ("cuda", device, "cuda:0"):
    state = torch.load(path, map_location=where)
    assert state["step"] == 3
    assert all(t.is_cuda for t in state["model"].values())
    model.load_state_dict(state["model"])
    model(torch.randn(4, 3, device=device)).sum().backward()
on_host = torch.load(path, map_location="cpu")
assert all(t.device.type == "cpu" for t in on_host["model"].values())
print("OK")
