"""A correct small training script: nothing here should be reported.

An MLP learns a synthetic classification task on the GPU: zero_grad / backward / step
each batch, validation under `torch.no_grad()`, and only `loss.item()` crosses to the host. The
printed training loss decreases.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

use_cuda = torch.cuda.is_available()
device = torch.device("cuda" if use_cuda else "cpu")
torch.backends.cudnn.benchmark = use_cuda
torch.manual_seed(0)

n_features, n_classes = 20, 4
centers = torch.randn(n_classes, n_features) * 3


def make_split(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(0, n_classes, (n,))
    points = centers[labels] + torch.randn(n, n_features)
    return points.to(device, non_blocking=True), labels.to(device, non_blocking=True)


x_train, y_train = make_split(512)
x_val, y_val = make_split(128)

model = nn.Sequential(nn.Linear(n_features, 64), nn.ReLU(), nn.Linear(64, n_classes)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

for epoch in range(5):
    model.train()
    total = 0.0
    for i in range(0, len(x_train), 64):
        xb, yb = x_train[i : i + 64], y_train[i : i + 64]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        total += loss.item()
    model.eval()
    with torch.no_grad():
        val_loss = F.cross_entropy(model(x_val), y_val).item()
    print(f"epoch {epoch}: train loss {total / 8:.4f}  val loss {val_loss:.4f}")
