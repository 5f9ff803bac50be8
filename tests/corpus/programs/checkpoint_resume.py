"""Checkpointing and resuming, modelled on the PyTorch recipe "Saving and Loading a General
Checkpoint": ``torch.save({'model_state_dict', 'optimizer_state_dict', 'epoch', 'loss'})`` to
a file, a fresh model and optimizer, ``load_state_dict`` for both, training resumed; the model
and optimizer are also round-tripped through ``pickle``/``copy.deepcopy`` as
``multiprocessing`` and experiment trackers do.

Bug variants (first argument):
- ``resume-not-moved``: the resumed model is built and loaded but never moved to the device.
"""

import copy
import os
import pickle
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 24)
        self.fc2 = nn.Linear(24, 1)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))  # bug[resume-not-moved]: device-mismatch


def train_epoch(model, optimizer, x, y):
    model.train()
    for i in range(0, len(x), 16):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x[i : i + 16]), y[i : i + 16])
        loss.backward()
        optimizer.step()
    return loss


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    x = torch.randn(64, 6).to(device)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    x_val, y_val = x[:16] + 0.1, y[:16]
    model = Net().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    val_losses = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "checkpoint.pt")
        for epoch in range(2):
            loss = train_epoch(model, optimizer, x, y)
            torch.save(
                {
                    "epoch": epoch,
                    "model_state_dict": model.state_dict(),
                    "optimizer_state_dict": optimizer.state_dict(),
                    "loss": loss.item(),
                },
                path,
            )
        print(f"saved at epoch {epoch}: loss {loss.item():.4f}")

        resumed = Net()
        if BUG != "resume-not-moved":
            resumed.to(device)
        resumed_opt = torch.optim.Adam(resumed.parameters(), lr=1e-2)
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
        resumed.load_state_dict(checkpoint["model_state_dict"])
        resumed_opt.load_state_dict(checkpoint["optimizer_state_dict"])
    clone = pickle.loads(pickle.dumps(resumed))
    opt_copy = copy.deepcopy(resumed_opt)
    same = all(torch.equal(a, b) for a, b in zip(clone.parameters(), resumed.parameters()))
    print(f"pickled copy equal: {same}, optimizer state kept: {len(opt_copy.state) == 4}")
    for epoch in range(checkpoint["epoch"] + 1, 4):
        loss = train_epoch(resumed, resumed_opt, x, y)
        resumed.eval()
        with torch.no_grad():
            val_loss = F.mse_loss(resumed(x_val), y_val)
        val_losses.append(val_loss)
        print(f"epoch {epoch}: loss {loss.item():.4f} val {float(val_losses[-1]):.4f}")


if __name__ == "__main__":
    main()
