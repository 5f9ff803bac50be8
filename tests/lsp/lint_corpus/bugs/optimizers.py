"""Optimizers made in the loop that steps them: each iteration's starts with no state."""

import torch
import torch.nn.functional as F
from torch import optim
from torch.optim import AdamW


def train_epoch(model, loader, device, lr=1e-3):
    model.train()
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)  # expect: optimizer-in-loop
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()


def fit_regression(net, xs, ys, steps=100):
    for _step in range(steps):
        opt = optim.SGD(net.parameters(), lr=0.01, momentum=0.9)  # expect: optimizer-in-loop
        opt.zero_grad()
        F.mse_loss(net(xs), ys).backward()
        opt.step()


class Trainer:
    def __init__(self, model, loader):
        self.model = model
        self.loader = loader

    def fit(self, epochs):
        for _epoch in range(epochs):
            for batch in self.loader:
                loss = self.model(**batch).loss
                self.optimizer = AdamW(  # expect: optimizer-in-loop
                    self.model.parameters(), lr=5e-5, weight_decay=0.01
                )
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
