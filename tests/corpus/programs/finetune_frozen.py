"""Fine-tuning a new classifier head on a frozen backbone, modelled on the PyTorch tutorial
"Transfer Learning for Computer Vision" (ConvNet as fixed feature extractor:
``requires_grad_(False)`` on the backbone, an optimizer over the head's parameters only,
features under ``torch.no_grad()``). The "pretrained" backbone is trained first on a
pretext task in the same program.

Bug variants (first argument):
- ``head-in-no-grad``: the head's forward is indented into the ``with torch.no_grad():`` block
  that computes the frozen features.
- ``zero-grad-backbone``: ``backbone.zero_grad()`` instead of ``head.zero_grad()``: the module
  zeroed is not the one the optimizer updates.
- ``val-loss-history``: the validation loss of each epoch computed without ``torch.no_grad()``
  and appended to the history as a tensor, so the list keeps every epoch's graph.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    x = torch.randn(96, 1, 10, 10)
    pretext_y = (x.mean(dim=(1, 2, 3)) > 0).long()
    y = (x[:, :, :5].mean(dim=(1, 2, 3)) > x[:, :, 5:].mean(dim=(1, 2, 3))).long()

    backbone = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    ).to(device)
    pretext_head = nn.Linear(16, 2).to(device)
    pretrain_opt = torch.optim.SGD([*backbone.parameters(), *pretext_head.parameters()], lr=0.1)
    for _ in range(3):  # "pretraining"
        pretrain_opt.zero_grad()
        loss = F.cross_entropy(pretext_head(backbone(x.to(device))), pretext_y.to(device))
        loss.backward()
        pretrain_opt.step()
    print(f"pretext loss {loss.item():.4f}")
    x, x_val, y, y_val = x[:80], x[80:].to(device), y[:80], y[80:].to(device)

    backbone.requires_grad_(False)
    backbone.eval()
    head = nn.Linear(16, 2).to(device)
    optimizer = torch.optim.SGD(head.parameters(), lr=0.5, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    val_history = []
    for epoch in range(3):
        for i in range(0, len(x), 32):
            inputs, labels = x[i : i + 32].to(device), y[i : i + 32].to(device)
            if BUG == "zero-grad-backbone":
                backbone.zero_grad()
            else:
                head.zero_grad()
            with torch.no_grad():
                features = backbone(inputs)
                if BUG == "head-in-no-grad":
                    outputs = head(features)
            if BUG != "head-in-no-grad":
                outputs = head(features)
            loss = F.cross_entropy(outputs, labels)
            loss.backward()  # bug[head-in-no-grad]: grad-lost
            optimizer.step()  # bug[zero-grad-backbone]: missing-zero-grad
        scheduler.step()
        head.eval()
        if BUG == "val-loss-history":
            val_loss = F.cross_entropy(head(backbone(x_val)), y_val)
            val_history.append(val_loss)  # bug[val-loss-history]: graph-kept
        else:
            with torch.no_grad():
                val_loss = F.cross_entropy(head(backbone(x_val)), y_val)
            val_history.append(val_loss.item())
        head.train()
        print(f"epoch {epoch}: loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.3f}")
    print(f"best val loss {float(min(val_history)):.4f}")


if __name__ == "__main__":
    main()
