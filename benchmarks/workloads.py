"""The workloads the benchmarks time: an MLP training step and a loop of scalar-sized ops.

Kept in one module so every benchmark (engine overhead, trace, adapter) times the same code.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn


def make_mlp_step(batch: int = 64, device: str = "cpu") -> Callable[[int], None]:
    """An MLP 784-256-10 training step at ``batch`` (SGD, cross-entropy) on ``device``, ``n``
    times."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(batch, 784, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def mlp_steps(n: int) -> None:
        for _ in range(n):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()

    return mlp_steps


def make_scalar_loop() -> Callable[[int], None]:
    """A loop of scalar-sized tensor ops: five tiny ops per iteration."""

    def scalar_loop(n: int) -> None:
        a = torch.tensor(1.0)
        b = torch.tensor(0.5)
        for _ in range(n):
            c = a * b + a
            c = torch.sin(c)
            a = c - b * 0.1

    return scalar_loop


def make_scalar_autograd_loop() -> Callable[[int], None]:
    """Fitting ``y = w * x + b`` with scalar tensors: forward, backward, manual SGD step."""

    def scalar_autograd_loop(n: int) -> None:
        w = torch.tensor(0.0, requires_grad=True)
        b = torch.tensor(0.0, requires_grad=True)
        x, y = torch.tensor(2.0), torch.tensor(7.0)
        for _ in range(n):
            loss = (w * x + b - y) ** 2
            loss.backward()
            with torch.no_grad():
                w -= 0.01 * w.grad
                b -= 0.01 * b.grad
            w.grad = None
            b.grad = None

    return scalar_autograd_loop
