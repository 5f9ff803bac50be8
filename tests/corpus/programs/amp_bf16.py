"""Mixed-precision training with ``torch.autocast`` and ``torch.amp.GradScaler``, modelled on
the PyTorch "Automatic Mixed Precision" recipe (``scaler.scale(loss).backward()``,
``scaler.unscale_`` before ``clip_grad_norm_``, ``scaler.step``, ``scaler.update``), on a
regression MLP. It runs on ``torch.device("cpu")`` with ``dtype=torch.bfloat16``: the stand-in
accelerator has no autocast. The CPU ``GradScaler`` works in torch 2.13 (it is a no-op
in effect for bfloat16, whose range needs no scaling, but real code keeps it for float16).

Bug variants (first argument):
- ``pred-squeeze``: the ``(B, 1)`` predictions compared with ``(B,)`` targets in ``F.mse_loss``
  (PyTorch only warns): the loss is over a ``(B, B)`` broadcast.
- ``zero-grad-once``: ``optimizer.zero_grad()`` before the loop only; gradients are unscaled
  and clipped every step but never cleared.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

BUG = sys.argv[1] if len(sys.argv) > 1 else ""


def main() -> None:
    torch.manual_seed(0)
    device = torch.device("cpu")  # autocast: the stand-in accelerator does not support it
    x = torch.randn(128, 16)
    y = x[:, :4].sum(dim=1) - x[:, 4]
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scaler = torch.amp.GradScaler(device.type)

    if BUG == "zero-grad-once":
        optimizer.zero_grad(set_to_none=True)
    for epoch in range(3):
        for i in range(0, len(x), 32):
            xb, yb = x[i : i + 32].to(device), y[i : i + 32].to(device)
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                pred = model(xb)
                if BUG == "pred-squeeze":
                    loss = F.mse_loss(pred.float(), yb)  # bug[pred-squeeze]: broadcast
                else:
                    loss = F.mse_loss(pred.float().squeeze(-1), yb)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            scaler.step(optimizer)  # bug[zero-grad-once]: missing-zero-grad
            scaler.update()
            if BUG != "zero-grad-once":
                optimizer.zero_grad(set_to_none=True)
        print(f"epoch {epoch}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
