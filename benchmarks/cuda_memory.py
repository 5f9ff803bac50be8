"""The memory books against CUDA's own count: ``python benchmarks/cuda_memory.py`` on a machine
with a GPU (``--simulate`` runs the same on the simulated device, where the CUDA count is the
simulation's own).

A small CNN is built and trained a few steps on ``cuda:0`` under a watch keeping the books
(``watch(memory=True)``, started before the model so that every tensor comes from a watched op).
At each point below it prints the books' live bytes on ``cuda:0``, the same with each storage
rounded up as CUDA's caching allocator rounds a block (to 512 bytes), the ``.grad`` tensors
the books have not counted yet (autograd's engine makes them outside any torch function; the
books count them at the next ``optimizer.step()``), and ``torch.cuda.memory_allocated()``.
What is left over ("rest") is memory no tensor the books saw holds: what an op saves inside
itself for backward (``max_pool2d``'s int64 indices, 2 MiB here, after the forward), and on a
GPU the cuBLAS / cuDNN workspaces the first matmul or convolution allocates.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import torch
from torch import nn

import tensor_dap
from tensor_dap.agent.storage import real_storages

BLOCK = 512


def _unseen_grad_bytes(model: nn.Module, books: Any) -> int:
    """The ``.grad`` tensors the books have not counted yet (they count them at the next
    ``optimizer.step()``)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    storages = [s for grad in grads for s in real_storages(grad)]  # (the simulation wraps)
    return sum(_rounded(s.nbytes()) for s in storages if s._cdata not in books._entries)


def _rounded(nbytes: int) -> int:
    return max(1, math.ceil(nbytes / BLOCK)) * BLOCK if nbytes else 0


def _row(label: str, watch: Any, model: nn.Module) -> None:
    books = watch.memory
    books.sweep()
    device = "cuda:0"
    live = books.live_bytes().get(device, 0)
    rounded = sum(_rounded(n) for d, n, _ in books._entries.values() if d == device)
    grads = _unseen_grad_bytes(model, books)
    allocated = torch.cuda.memory_allocated()
    print(
        f"{label:34s} {live:>12,} {rounded:>12,} {grads:>10,} {allocated:>12,} "
        f"{allocated - rounded - grads:>+12,}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulate", action="store_true", help="on the simulated CUDA device")
    parser.add_argument("--steps", type=int, default=3)
    options = parser.parse_args()
    if not options.simulate and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: run with --simulate, or on a machine with a GPU")
    watch = tensor_dap.watch(memory=True, simulate="cuda" if options.simulate else None)
    print(f"torch {torch.__version__}; {torch.cuda.get_device_name()}")
    print(f"{'':34s} {'books':>12} {'books @512':>12} {'grads':>10} {'allocated':>12} {'rest':>12}")
    with watch:
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(16 * 16 * 16, 10),
        ).to("cuda")
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = torch.randn(64, 3, 32, 32, device="cuda")
        y = torch.randint(0, 10, (64,), device="cuda")
        _row("model and one batch", watch, model)
        for step in range(options.steps):
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            _row(f"step {step}: after forward", watch, model)
            loss.backward()
            _row(f"step {step}: after backward", watch, model)
            optimizer.step()
            _row(f"step {step}: after optimizer.step()", watch, model)
        del loss
        optimizer.zero_grad(set_to_none=True)
        _row("end (grads dropped, loss freed)", watch, model)
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if not options.simulate and clear is not None:
            clear()  # the workspaces cuBLAS took from the caching allocator at the first matmul
            _row("end, cuBLAS workspaces freed", watch, model)


if __name__ == "__main__":
    main()
