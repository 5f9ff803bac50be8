"""The memory books' own cost as live tensors grow: ``python benchmarks/memory_books.py``.

For 1k, 10k and 100k small tensors made and kept alive (``torch.zeros(4)`` in a loop), under a
watch with the books (``watch(rules=[], memory=True)``: what ``check --memory`` adds) and
without (``watch(rules=[])``), side by side in one run:

- tensor-dap's own memory per live storage: what ``tracemalloc`` sees allocated by Python
  while the books hold them, less the same run without books (the tensors themselves are
  allocated by torch, outside ``tracemalloc``, and are the same in both);
- the time per new tensor with the books and without (CPU time, median of rounds).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import tracemalloc
from typing import Any

import torch

import tensor_dap


def _make(count: int) -> list[Any]:
    return [torch.zeros(4) for _ in range(count)]


def _python_bytes(books: bool, count: int) -> int:
    """Bytes Python allocated while ``count`` tensors were made and kept (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    with tensor_dap.watch(rules=[], memory=books) as watch:
        before = tracemalloc.get_traced_memory()[0]
        kept = _make(count)
        after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert watch.memory is None or len(watch.memory._entries) >= count
    del kept
    return after - before


def _seconds_per_tensor(books: bool, count: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        with tensor_dap.watch(rules=[], memory=books):
            start = time.process_time()
            kept = _make(count)
            times.append((time.process_time() - start) / count)
        del kept
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, 1 thread")
    print(
        f"{'live tensors':>12}  {'books: own memory':>18}  {'per tensor':>10}  "
        f"{'µs per new tensor: books / plain':>32}"
    )
    for count in (1_000, 10_000, 100_000):
        own = _python_bytes(True, count) - _python_bytes(False, count)
        with_books = _seconds_per_tensor(True, count, options.rounds)
        without = _seconds_per_tensor(False, count, options.rounds)
        print(
            f"{count:>12}  {own / 2**20:>14.1f} MiB  {own / count:>8.0f} B  "
            f"{with_books * 1e6:>22.2f} / {without * 1e6:.2f}"
        )


if __name__ == "__main__":
    main()
