"""A running loss summed with its autograd graph, the PyTorch FAQ's growing-memory loop.

`total_loss += loss` adds the loss *tensor*, so `total_loss` carries the graph of every
iteration: memory grows each step although nothing looks wrong. The evaluation loop below
makes it worse: without `torch.no_grad()` each batch's activations stay saved in
`val_loss`'s graph until the loop ends. `loss.item()` (or `loss.detach()`) is the fix.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if torch.cuda.is_available():
    torch.cuda.manual_seed_all(0)
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
batches = [(torch.randn(16, 10, device=device), torch.randint(0, 3, (16,), device=device))]
batches *= 6


for epoch in range(2):
    total_loss = 0.0
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss  # expect: graph-kept
    val_loss = 0.0
    for x, y in batches:
        val_loss += F.cross_entropy(model(x), y)  # expect: graph-kept
    train, val = total_loss.item() / len(batches), val_loss.item() / len(batches)
    print(f"epoch {epoch}: train {train:.4f} val {val:.4f}")
