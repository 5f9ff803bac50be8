"""A LightningModule-like base class whose ``log_dict`` calls ``log``, which keeps what it is
given in ``self._logged``; the module's ``training_step`` logs its loss with ``log_dict``, and a
hand-written trainer moves the model (``model.to(self.device)``) and runs the loop. With
``fixed`` on the command line it logs ``loss.item()``."""

import sys
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = "fixed" in sys.argv


class LitBase(nn.Module):
    def __init__(self):
        super().__init__()
        self._logged = defaultdict(list)

    def log(self, name, value):
        self._logged[name].append(value)

    def log_dict(self, metrics):
        for k, v in metrics.items():
            self.log(k, v)

    def pop_epoch_metrics(self):
        out = {k: sum(float(v) for v in vals) / len(vals) for k, vals in self._logged.items()}
        self._logged.clear()
        return out


class LitModel(LitBase):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    def training_step(self, batch):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log_dict({"train_loss": loss.item() if FIXED else loss})
        return loss


class MiniTrainer:
    def __init__(self):
        self.device = torch.device("cpu")

    def fit(self, model, batches, epochs=2):
        model.to(self.device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(epochs):
            for batch in batches:
                loss = model.training_step([b.to(self.device) for b in batch])
                opt.zero_grad()
                loss.backward()
                opt.step()
            print(epoch, round(model.pop_epoch_metrics()["train_loss"], 4))


torch.manual_seed(0)
batches = [(torch.randn(16, 8), torch.randint(0, 2, (16,))) for _ in range(6)]
MiniTrainer().fit(LitModel(), batches)
