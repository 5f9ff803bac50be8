"""A small ResNet image classifier, modelled on torchvision's ``BasicBlock`` and the training
loop of pytorch/examples ``mnist`` / ``imagenet``.

The residual block adds the shortcut in place (``out += identity``) on the batch-norm output and
applies the ReLU after it, as torchvision does; accuracy is counted on the device.

Bug variants (first argument):
- ``relu-before-add``: the ReLU moved before the shortcut add, so ``out += identity`` modifies
  the ReLU output its backward saved; PyTorch raises at ``backward()``.
- ``labels-on-cpu``: the labels are never moved to the device.
- ``cpu-correct-counter``: the running count of correct predictions starts as
  ``torch.zeros(1)`` on the CPU and meets the device predictions.
- ``loss-history-graph``: the loss history keeps ``loss`` itself, not ``loss.item()``.
- ``eval-without-no-grad``: the evaluation loop runs without ``torch.no_grad()`` and sums the
  loss tensors: every batch's activations stay saved until the loop ends.
"""

import contextlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""


class BasicBlock(nn.Module):
    def __init__(self, planes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if BUG == "relu-before-add":
            out = F.relu(out)
        out += identity  # bug[relu-before-add]: inplace-saved
        return F.relu(out)


class ResNet(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8))
        self.layer1 = BasicBlock(8)
        self.layer2 = BasicBlock(8)
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.stem(x))
        x = self.layer2(self.layer1(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    images = torch.randn(64, 1, 12, 12)
    labels = (images.mean(dim=(1, 2, 3)) > 0).long() + 2 * (images[:, 0, 0, 0] > 0).long()
    model = ResNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    history = []
    for epoch in range(2):
        model.train()
        correct = torch.zeros(1) if BUG == "cpu-correct-counter" else torch.zeros(1, device=device)
        for i in range(0, len(images), 16):
            data = images[i : i + 16].to(device)
            target = labels[i : i + 16]
            if BUG != "labels-on-cpu":
                target = target.to(device)
            optimizer.zero_grad()
            output = model(data)
            loss = F.cross_entropy(output, target)  # bug[labels-on-cpu]: device-mismatch
            loss.backward()
            optimizer.step()
            pred = output.argmax(dim=1)
            correct = correct + (pred == target).sum()  # bug[cpu-correct-counter]: device-mismatch
            logged = loss if BUG == "loss-history-graph" else loss.item()
            history.append(logged)  # bug[loss-history-graph]: graph-kept
        print(f"epoch {epoch}: loss {loss.item():.4f} correct {int(correct.item())}/{len(images)}")
        model.eval()
        val_loss = 0.0
        with contextlib.nullcontext() if BUG == "eval-without-no-grad" else torch.no_grad():
            for i in range(0, len(images), 16):
                data, target = images[i : i + 16].to(device), labels[i : i + 16].to(device)
                out = model(data)
                val_loss += F.cross_entropy(out, target)  # bug[eval-without-no-grad]: graph-kept
        print(f"epoch {epoch}: val loss {val_loss.item() / 4:.4f} (last {float(history[-1]):.4f})")


if __name__ == "__main__":
    main()
