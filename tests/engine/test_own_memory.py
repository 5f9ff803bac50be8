"""tensor-dap's own memory does not grow with the number of training steps: what it remembers
of a step (gradients' versions, backward roots, the books' storages) is bounded by what is alive,
not by how long the program has run. A job of a million steps would otherwise end with hundreds
of MB held by the debugger, and the garbage collector walking it all."""

from __future__ import annotations

import gc
import os
import tracemalloc
from typing import Callable

import pytest
import torch
from torch import nn

import tensor_dap

#: bytes tensor-dap's own code may hold more after the measured steps than before them (a
#: table's dead entries wait for its next sweep: it holds up to twice its live ones); a table
#: growing per step gains ~200 bytes per entry: over 1500 steps of a model with 4 parameters,
#: ~100 KB
ALLOWED_GROWTH = 32 * 1024


def _training(set_to_none: bool) -> Callable[[int], None]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(16, 4), torch.randn(16, 1)

    def run(n: int) -> None:
        for _ in range(n):
            optimizer.zero_grad(set_to_none=set_to_none)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()

    return run


def _held_by_tensor_dap() -> int:
    """Bytes now allocated by tensor-dap's Python code (the torch and interpreter allocations
    around it come and go with caches and free lists that have nothing to do with us)."""
    gc.collect()
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, os.path.join(os.path.dirname(tensor_dap.__file__), "*"))]
    )
    return sum(stat.size for stat in snapshot.statistics("filename"))


@pytest.mark.parametrize("memory", [False, True], ids=["default", "books"])
@pytest.mark.parametrize("set_to_none", [True, False], ids=["set_to_none", "zeroed"])
def test_watch_memory_does_not_grow_with_steps(memory: bool, set_to_none: bool) -> None:
    run = _training(set_to_none)
    tracemalloc.start()
    try:
        with tensor_dap.watch(memory=memory) as watch:
            run(200)  # past every call site's full sampling and the caches' first fill
            before = _held_by_tensor_dap()
            run(1500)
            grown = _held_by_tensor_dap() - before
    finally:
        tracemalloc.stop()
    assert not watch.findings
    assert grown < ALLOWED_GROWTH, f"tensor-dap's code gained {grown} bytes over 1500 steps"
