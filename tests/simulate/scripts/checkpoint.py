"""Saving a CUDA model and loading it back with map_location="cuda" or a device, or with
none: what was saved from the GPU comes back there (a saved embedding table used with CUDA
tensors is no device mismatch)."""

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

table = torch.randn(5, 3, device=device)
leaf = torch.ones(3, device=device, requires_grad=True)
torch.save({"table": table, "leaf": leaf, "host": torch.arange(3), "step": 4}, path)
for weights_only in (True, False):
    saved = torch.load(path, weights_only=weights_only)
    assert saved["table"].device == table.device and torch.equal(saved["table"], table)
    assert saved["leaf"].device == leaf.device and saved["leaf"].requires_grad
    assert saved["host"].device.type == "cpu" and saved["step"] == 4
    (saved["table"] @ saved["leaf"]).sum().backward()
    assert saved["leaf"].grad is not None
print("OK")
