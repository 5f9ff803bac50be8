"""Gradient accumulation, modelled on the Hugging Face / nanoGPT training loops: the loss of
each micro-batch divided by ``accum_steps``, ``backward()`` every micro-batch, ``step()`` and
``zero_grad()`` every ``accum_steps`` micro-batches, the logged loss summed on the device.

Bug variants (first argument):
- ``no-zero-grad-after-step``: ``zero_grad()`` forgotten after ``step()``: every optimizer step
  also applies the gradients of all earlier windows.
- ``cpu-running-loss``: the logged loss accumulates into ``torch.zeros(1)`` made on the CPU.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""
ACCUM_STEPS = 4


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    x = torch.randn(256, 12)
    y = (x @ torch.randn(12, 3)).argmax(dim=1)
    model = nn.Sequential(nn.Linear(12, 48), nn.ReLU(), nn.Linear(48, 3)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)

    optimizer.zero_grad()
    for epoch in range(2):
        running = torch.zeros(1) if BUG == "cpu-running-loss" else torch.zeros(1, device=device)
        for micro_step, i in enumerate(range(0, len(x), 16)):
            xb, yb = x[i : i + 16].to(device), y[i : i + 16].to(device)
            loss = F.cross_entropy(model(xb), yb) / ACCUM_STEPS
            loss.backward()
            running = running + loss.detach()  # bug[cpu-running-loss]: device-mismatch
            if (micro_step + 1) % ACCUM_STEPS == 0:
                optimizer.step()  # bug[no-zero-grad-after-step]: missing-zero-grad
                if BUG != "no-zero-grad-after-step":
                    optimizer.zero_grad()
        print(f"epoch {epoch}: mean loss {running.item() * ACCUM_STEPS / (micro_step + 1):.4f}")


if __name__ == "__main__":
    main()
