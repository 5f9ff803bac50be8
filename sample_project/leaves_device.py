"""Collecting predictions on the host inside the training loop.

`out.detach().cpu()` copies every step's output from the GPU to the host, which on a
GPU synchronises the device each iteration and stalls the pipeline. PyTorch says nothing; it is
only slow. Logging `loss.item()` is a one-number copy and is fine.
"""

import torch
import torch.nn as nn

# on a machine without a GPU: tensor-dap check --simulate cuda sample_project/leaves_device.py
# (plain `python` runs it on the CPU, where no tensor leaves a device)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
x = torch.randn(128, 16, device=device)
y = torch.randint(0, 4, (128,), device=device)

preds = []
for step in range(5):
    optimizer.zero_grad()
    out = model(x)
    loss = criterion(out, y)
    loss.backward()
    optimizer.step()
    preds.append(out.detach().cpu())  # expect: leaves-device
    print(f"step {step}: loss {loss.item():.4f}")

print(f"kept {len(preds)} prediction tensors on the host")
