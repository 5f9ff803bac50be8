"""Clean: intentional gradient accumulation; the checker must report nothing.

Four micro-batches each call `backward()` on a loss scaled by 1/4, then one `optimizer.step()`
and `optimizer.zero_grad()`: gradients accumulate on purpose between steps, never across them.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from tensor_dap.testing import pick_device

device = pick_device()
torch.manual_seed(0)

accumulation_steps = 4
model = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 1)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
batches = [(torch.randn(8, 12, device=device), torch.randn(8, 1, device=device)) for _ in range(16)]

optimizer.zero_grad()
for i, (x, y) in enumerate(batches):
    loss = F.mse_loss(model(x), y) / accumulation_steps
    loss.backward()
    if (i + 1) % accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
        print(f"update {(i + 1) // accumulation_steps}: last micro-batch loss {loss.item():.4f}")
