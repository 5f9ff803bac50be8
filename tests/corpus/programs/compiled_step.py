"""A ``torch.compile``d model in an ordinary training loop, modelled on the PyTorch tutorial
"Introduction to torch.compile" (``model = torch.compile(model)``, loss and optimizer outside).
It runs on ``torch.device("cpu")`` (the stand-in accelerator has no compiler backend) with
``backend="aot_eager"``: inductor's C++ compile of even this tiny model takes ~16 s on two
cores, aot_eager still traces with dynamo and AOTAutograd in well under a second.

Bug variants (first argument):
- ``no-zero-grad``: the loop never calls ``optimizer.zero_grad()``.
- ``hand-mse-broadcast``: a hand-written MSE ``((y - pred) ** 2).mean()`` with ``y`` ``(N,)``
  and ``pred`` ``(N, 1)``.
"""

import sys

import torch
import torch.nn as nn

BUG = sys.argv[1] if len(sys.argv) > 1 else ""


def main() -> None:
    torch.manual_seed(0)
    device = torch.device("cpu")  # torch.compile: the stand-in accelerator is not supported
    x = torch.randn(64, 5, device=device)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 0.0, 3.0]) + 0.1
    model = nn.Sequential(nn.Linear(5, 32), nn.SiLU(), nn.Linear(32, 1)).to(device)
    compiled = torch.compile(model, backend="aot_eager")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    for step in range(12):
        if BUG != "no-zero-grad":
            optimizer.zero_grad()
        pred = compiled(x)
        if BUG == "hand-mse-broadcast":
            loss = ((y - pred) ** 2).mean()  # bug[hand-mse-broadcast]: broadcast
        else:
            loss = ((y - pred.squeeze(-1)) ** 2).mean()
        loss.backward()
        optimizer.step()  # bug[no-zero-grad]: missing-zero-grad
        if step % 4 == 3:
            print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
