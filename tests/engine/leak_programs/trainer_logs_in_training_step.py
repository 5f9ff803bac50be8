"""A hand-written Lightning-style trainer: ``fit`` runs the loop and calls backward();
the module's ``training_step`` logs its loss with ``self.log``, which keeps what it is given.
With ``fixed`` on the command line it logs ``loss.item()``; with ``accumulate`` the trainer
accumulates the gradients of two batches, ``(loss / 2).backward()``."""

import sys
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch import nn

FIXED = "fixed" in sys.argv
ACCUMULATE = 2 if "accumulate" in sys.argv else 1


class LitClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
        self.logged = defaultdict(list)

    def log(self, name, value):
        self.logged[name].append(value)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train/loss", loss.item() if FIXED else loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class Trainer:
    def __init__(self, max_epochs):
        self.max_epochs = max_epochs

    def fit(self, module, loader):
        optimizer = module.configure_optimizers()
        for _epoch in range(self.max_epochs):
            for batch_idx, batch in enumerate(loader):
                loss = module.training_step(batch, batch_idx)
                if ACCUMULATE == 1:
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    continue
                (loss / ACCUMULATE).backward()
                if (batch_idx + 1) % ACCUMULATE == 0:
                    optimizer.step()
                    optimizer.zero_grad()


torch.manual_seed(0)
loader = [(torch.randn(16, 10), torch.randint(0, 3, (16,))) for _ in range(8)]
model = LitClassifier()
Trainer(max_epochs=2).fit(model, loader)
print(f"logged {len(model.logged['train/loss'])} losses")
