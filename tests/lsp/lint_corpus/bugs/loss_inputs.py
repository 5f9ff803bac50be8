"""Softmax probabilities given to cross-entropy, and nll_loss given what it does not expect."""

import torch.nn as nn
import torch.nn.functional as F

criterion = nn.CrossEntropyLoss()
nll = nn.NLLLoss()
classifier = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10), nn.Softmax(dim=1))
head = nn.Linear(128, 10)


class SoftmaxNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x):
        return F.softmax(self.fc(x), dim=1)


def train_step(images, labels, features, optimizer):
    logits = head(features)
    loss = F.cross_entropy(F.softmax(logits, dim=1), labels)  # expect: softmax-into-cross-entropy
    probs = logits.softmax(dim=-1)
    loss = loss + criterion(probs, labels)  # expect: softmax-into-cross-entropy
    outputs = classifier(images)
    loss = loss + criterion(outputs, labels)  # expect: softmax-into-cross-entropy
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def train(loader, optimizer, device):
    model = SoftmaxNet().to(device)
    for images, labels in loader:
        optimizer.zero_grad()
        loss = criterion(model(images), labels)  # expect: softmax-into-cross-entropy
        loss.backward()
        optimizer.step()


def nll_step(features, labels, outputs):
    loss = F.nll_loss(head(features), labels)  # expect: nll-loss-input
    scores = head(features)
    loss = loss + nll(F.softmax(scores, dim=1), labels)  # expect: nll-loss-input
    loss = loss + F.nll_loss(outputs.logits, labels)  # expect: nll-loss-input
    return loss
