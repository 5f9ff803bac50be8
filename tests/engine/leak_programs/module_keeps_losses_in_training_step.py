"""A Lightning-style module keeps each training step's loss in ``self.train_losses`` for its
epoch-end report, graph and all (``loss.item()`` was meant); the loop runs in a ``fit()`` of
the script, which names the module as a global."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
        self.train_losses = []

    def training_step(self, batch):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.train_losses.append(loss)
        return loss

    def on_train_epoch_end(self, epoch):
        mean = torch.stack(self.train_losses[-len(batches) :]).mean().item()
        print(f"epoch {epoch}: mean loss {mean:.4f}")


torch.manual_seed(0)
model = Regressor()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
batches = [(torch.randn(8, 6), torch.randn(8, 1)) for _ in range(8)]


def fit(epochs):
    for epoch in range(epochs):
        for batch in batches:
            loss = model.training_step(batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.on_train_epoch_end(epoch)


fit(2)
