"""Where a watch's cost goes in a training step: ``python benchmarks/step_phases.py``.

Times each phase of the MLP training step of :mod:`workloads` (``zero_grad()``, the model's
forward, the loss, ``backward()``, ``optimizer.step()``) plain and under the no-op
``TorchFunctionMode`` (the floor of any mode-based engine), the default rules, and the default
rules with the memory books, in interleaved rounds of 12 steps (one watch per mode, resumed
around each round, as in ``overhead.py``), and prints each phase's median time plain and what
each mode adds to it, in µs. The phases are timed with ``time.perf_counter_ns`` around each
call, so the sum of the phases is a little more than ``overhead.py``'s whole step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Optional

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from overhead import _NoopMode  # noqa: E402

import tensor_dap  # noqa: E402

PHASES = ("zero_grad()", "model(x)", "loss", "backward()", "step()")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=150)
    options = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))

    def step(times: dict[str, list[int]]) -> None:
        t0 = time.perf_counter_ns()
        optimizer.zero_grad()
        t1 = time.perf_counter_ns()
        out = model(x)
        t2 = time.perf_counter_ns()
        loss = loss_fn(out, y)
        t3 = time.perf_counter_ns()
        loss.backward()
        t4 = time.perf_counter_ns()
        optimizer.step()
        t5 = time.perf_counter_ns()
        for phase, spent in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            times[phase].append(spent)

    modes: dict[str, Optional[Any]] = {
        "plain": None,
        "no-op mode": _NoopMode(),
        "default": tensor_dap.watch(),
        "default + books": tensor_dap.watch(memory=True),
    }
    times = {label: {phase: [] for phase in PHASES} for label in modes}
    for round_ in range(options.rounds + 2):
        for label, mode in modes.items():
            if mode is not None:
                mode.__enter__()
            for _ in range(12):
                step(times[label] if round_ >= 2 else {p: [] for p in PHASES})  # 2 warm-up rounds
            if mode is not None:
                mode.__exit__(None, None, None)
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, 1 thread")
    others = [label for label in modes if label != "plain"]
    print(f"{'phase':14s} {'plain µs':>9s}" + "".join(f" {label:>16s}" for label in others))
    for phase in PHASES:
        plain = statistics.median(times["plain"][phase]) / 1e3
        added = [statistics.median(times[label][phase]) / 1e3 - plain for label in others]
        print(f"{phase:14s} {plain:9.1f}" + "".join(f" {a:+16.1f}" for a in added))


if __name__ == "__main__":
    main()
