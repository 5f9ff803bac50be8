"""A training loop that never clears the gradients.

Without `optimizer.zero_grad()`, each `backward()` adds to the gradients of all previous steps,
so from the second iteration on `optimizer.step()` applies the running sum. PyTorch says nothing;
training behaves as if the learning rate kept growing: here the loss turns and climbs back up
after a few steps, where the same loop with `zero_grad()` keeps decreasing.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

# the device as most tutorials pick it; without a GPU, `tensor-dap check --simulate cuda` runs
# this on the CPU as if one were there
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 10, device=device)
y = torch.randint(0, 3, (64,), device=device)

for step in range(8):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()  # expect: missing-zero-grad
    print(f"step {step}: loss {loss.item():.4f}")
