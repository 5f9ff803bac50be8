"""A binary classifier on tabular data, modelled on the common beginner/Kaggle MLP: a
``DataLoader`` over a ``TensorDataset`` (``num_workers=0``), a 4-``Linear`` ``nn.Sequential``
ending in ``nn.Sigmoid``, ``nn.BCELoss``, accuracy from ``(out > 0.5)``.

Bug variants (first argument):
- ``threshold-pred``: the loss computed on ``(out > 0.5).float()`` (the "predictions") instead
  of the probabilities: the comparison has no gradient.
- ``numpy-roundtrip``: the probabilities clipped with NumPy (``np.clip`` on
  ``out.detach().cpu().numpy()``) and turned back into a tensor for the loss.
- ``labels-on-cpu``: only the features of each batch are moved to the device.
- ``optimizer-in-loop``: the Adam optimizer made inside the batch loop, next to its
  ``zero_grad()``: every batch gets a new Adam, whose state starts over.
"""

import sys

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    features = torch.randn(256, 10)
    labels = ((features[:, 0] + features[:, 1] * features[:, 2]) > 0).float().unsqueeze(1)
    loader = DataLoader(TensorDataset(features, labels), batch_size=64, shuffle=True)
    model = nn.Sequential(
        nn.Linear(10, 32),
        nn.ReLU(),
        nn.Linear(32, 32),
        nn.ReLU(),
        nn.Linear(32, 16),
        nn.ReLU(),
        nn.Linear(16, 1),
        nn.Sigmoid(),
    ).to(device)
    criterion = nn.BCELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    for epoch in range(3):
        epoch_loss, correct = 0.0, 0
        for xb, yb in loader:
            xb = xb.to(device)
            if BUG != "labels-on-cpu":
                yb = yb.to(device)
            if BUG == "optimizer-in-loop":
                optimizer = torch.optim.Adam(  # bug[optimizer-in-loop]: optimizer-remade
                    model.parameters(), lr=1e-2
                )
            optimizer.zero_grad()
            out = model(xb)
            if BUG == "threshold-pred":
                out = (out > 0.5).float()
            elif BUG == "numpy-roundtrip":
                probs = out.detach().cpu().numpy()  # the copy runs once: the backward() raises
                probs = np.clip(probs, 1e-4, 1 - 1e-4)
                out = torch.from_numpy(probs).to(device)
            loss = criterion(out, yb)  # bug[labels-on-cpu]: device-mismatch
            loss.backward()  # bug[threshold-pred,numpy-roundtrip]: grad-lost
            optimizer.step()
            epoch_loss += loss.item() * len(xb)
            correct += int(((out > 0.5).float() == yb).sum())
        print(f"epoch {epoch}: loss {epoch_loss / 256:.4f} acc {correct / 256:.3f}")


if __name__ == "__main__":
    main()
