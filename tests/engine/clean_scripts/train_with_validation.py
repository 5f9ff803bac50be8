"""Clean: a training loop with validation; the checker must report nothing.

zero_grad / backward / step every batch, validation under `torch.no_grad()`, and only scalars
(`loss.item()`, accuracy via `.float().mean().item()`) cross to the host.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from tensor_dap.testing import pick_device

device = pick_device()
torch.manual_seed(0)

n_features, n_classes = 16, 3
centers = torch.randn(n_classes, n_features) * 2
labels = torch.randint(0, n_classes, (384,))
points = centers[labels] + torch.randn(384, n_features)
x_train, y_train = points[:256].to(device), labels[:256].to(device)
x_val, y_val = points[256:].to(device), labels[256:].to(device)

model = nn.Sequential(nn.Linear(n_features, 32), nn.ReLU(), nn.Linear(32, n_classes)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

for epoch in range(3):
    model.train()
    for i in range(0, len(x_train), 32):
        xb, yb = x_train[i : i + 32], y_train[i : i + 32]
        optimizer.zero_grad()
        logits = model(xb)
        loss = F.cross_entropy(logits, yb)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        logits = model(x_val)
        val_loss = F.cross_entropy(logits, y_val)
        accuracy = (logits.argmax(1) == y_val).float().mean().item()
    print(f"epoch {epoch}: train {loss.item():.4f} val {val_loss.item():.4f} acc {accuracy:.3f}")
