"""Exponential moving average of the weights, modelled on timm's ``ModelEmaV2`` and the EMA in
the Hugging Face diffusers / DDPM training scripts: ``ema_model = copy.deepcopy(model)``
after the model is on its device, ``ema_p.mul_(decay).add_(p, alpha=1 - decay)`` under
``torch.no_grad()`` after each optimizer step, the EMA model used for evaluation.

Bug variants (first argument):
- ``ema-before-to``: the EMA copy made before ``model.to(device)``, so it stays on the CPU.
- ``zero-grad-ema``: ``ema_model.zero_grad()`` called instead of ``model.zero_grad()``.
- ``ema-without-no-grad``: the update written with ``lerp_`` and without ``torch.no_grad()``:
  autograd records it, and every EMA weight's history grows at each step.
"""

import copy
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""


@torch.no_grad()
def update_ema(ema_model: nn.Module, model: nn.Module, decay: float) -> None:
    for ema_p, p in zip(ema_model.parameters(), model.parameters()):
        ema_p.mul_(decay).add_(p, alpha=1 - decay)  # bug[ema-before-to]: device-mismatch
    for ema_b, b in zip(ema_model.buffers(), model.buffers()):
        ema_b.copy_(b)


def update_ema_by_lerp(ema_model: nn.Module, model: nn.Module, decay: float) -> None:
    for ema_p, p in zip(ema_model.parameters(), model.parameters()):
        ema_p.lerp_(p, 1 - decay)  # bug[ema-without-no-grad]: graph-kept
    for ema_b, b in zip(ema_model.buffers(), model.buffers()):
        ema_b.copy_(b)


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    x = torch.randn(128, 8)
    y = (x[:, :2].prod(dim=1, keepdim=True) > 0).float()
    model = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 1))
    if BUG == "ema-before-to":
        ema_model = copy.deepcopy(model)
    model.to(device)
    if BUG != "ema-before-to":
        ema_model = copy.deepcopy(model)
    ema_model.requires_grad_(False)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = x.to(device), y.to(device)

    for epoch in range(3):
        model.train()
        for i in range(0, len(x), 32):
            if BUG == "zero-grad-ema":
                ema_model.zero_grad()
            else:
                model.zero_grad()
            loss = F.binary_cross_entropy_with_logits(model(x[i : i + 32]), y[i : i + 32])
            loss.backward()
            optimizer.step()  # bug[zero-grad-ema]: missing-zero-grad
            if BUG == "ema-without-no-grad":
                update_ema_by_lerp(ema_model, model, decay=0.9)
            else:
                update_ema(ema_model, model, decay=0.9)
        ema_model.eval()
        with torch.no_grad():
            ema_loss = F.binary_cross_entropy_with_logits(ema_model(x), y)
        print(f"epoch {epoch}: loss {loss.item():.4f} ema loss {ema_loss.item():.4f}")


if __name__ == "__main__":
    main()
