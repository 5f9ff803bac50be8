"""In-place writes while a graph grows: ``python benchmarks/inplace_writes.py``.

A loop that writes in place to a fresh tensor at each step (an environment's observation
buffer, a running statistic) while an autograd graph grows over the steps (an episode's loss
summed before one ``backward()``), timed plain and under ``inplace-saved`` (which looks at the
live graphs before each in-place write of user code) for growing numbers of steps, side by side
in one run. The rule's cost per write must not grow with the graph: the ratio stays flat as the
steps grow (2.4–2.7× on 2026-12-03). It grew with them, from 10× at 100 steps to 126× at 1,600,
before the rule kept an index of the memory the graphs saved (``agent/saved_index.py``).
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

import tensor_dap


def episode(steps: int) -> None:
    weight = torch.randn(8, requires_grad=True)
    total = torch.zeros(())
    for _ in range(steps):
        observation = torch.zeros(8)
        observation.add_(1.0)  # the write, to a tensor no graph saved
        total = total - (weight * observation).sum()
    total.backward()


def main() -> None:
    torch.set_num_threads(1)
    watch = tensor_dap.watch(rules=["inplace-saved"])
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, 1 thread")
    print(f"{'steps':>6s} {'plain ms':>9s} {'watched ms':>11s} {'ratio':>6s}")
    for steps in (100, 200, 400, 800, 1600):
        plain, watched = [], []
        for _ in range(5):
            start = time.process_time()
            episode(steps)
            plain.append(time.process_time() - start)
            with watch:
                start = time.process_time()
                episode(steps)
                watched.append(time.process_time() - start)
        p, w = statistics.median(plain) * 1e3, statistics.median(watched) * 1e3
        print(f"{steps:6d} {p:9.1f} {w:11.1f} {w / p:6.2f}")


if __name__ == "__main__":
    main()
