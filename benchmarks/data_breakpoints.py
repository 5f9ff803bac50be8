"""The cost of an armed tensor data breakpoint, side by side in one run:
``python benchmarks/data_breakpoints.py``.

A data breakpoint ("Break on Value Change") on a tensor the loop never writes should cost
nothing beyond the watch already running: only in-place ops and optimizer steps get a check
(a storage-address lookup; the parameter list of each ``step()``), never a data read. Each
workload runs under the debugger's watch with the default rules, with and without a breakpoint
armed on a tensor it does not write, in many short interleaved rounds (see timing.py); the
printed ratio is armed / not armed (target ≤ 1.05×). For scale, the same against plain
execution, and a breakpoint alone (no rule on: the watch starts for it).

- (a) MLP training step (SGD): few in-place ops, one ``step()`` per iteration;
- (c) scalar model fit: an SGD step by hand, two in-place writes per iteration (the worst case
  for the check: every other op writes a tensor);
- a parameter of another model armed, stepped past by the loop's optimizer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import interleaved_ratios  # noqa: E402
from workloads import make_mlp_step, make_scalar_autograd_loop  # noqa: E402

import tensor_dap  # noqa: E402
from tensor_dap.agent import data_watch  # noqa: E402

Run = Callable[[int], None]


def _under(watch: Any, fn: Run, armed: Any = None) -> Run:
    """``fn`` under ``watch`` (resumed around each run), with a breakpoint on ``armed``."""
    data_id = None
    if armed is not None:
        data_watch.bind(watch)
        data_id = json.loads(data_watch.offer(armed, "watched"))["dataId"]

    def run(n: int) -> None:
        if data_id is not None:  # armed for this run only: the other runs pay nothing of it
            data_watch.bind(watch)
            data_watch.set_breakpoints([{"dataId": data_id}])
        watch.start()
        try:
            fn(n)
        finally:
            watch.stop()
            if data_id is not None:
                data_watch.set_breakpoints([])

    return run


def measure(name: str, fn: Run, watched: Any, n: int, rounds: int) -> None:
    base = _under(tensor_dap.watch(), fn)
    armed = _under(tensor_dap.watch(), fn, watched)
    _, against_watch = interleaved_ratios(
        base, {"armed / not armed": armed}, n, rounds, time.process_time
    )
    plain, against_plain = interleaved_ratios(
        fn,
        {
            "default rules": _under(tensor_dap.watch(), fn),
            "default rules + armed": _under(tensor_dap.watch(), fn, watched),
            "no rule, armed only": _under(tensor_dap.watch(rules=[]), fn, watched),
        },
        n,
        max(5, rounds // 3),
        time.process_time,
    )
    print(f"\n{name}: plain {plain * 1e6:.1f} µs per iteration")
    print(f"  {'armed / not armed (target ≤ 1.05)':38s} {against_watch['armed / not armed']:6.3f}×")
    for label, ratio in against_plain.items():
        print(f"  {label + ' / plain':38s} {ratio:6.2f}×")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=45)
    parser.add_argument("--quick", action="store_true", help="fewer iterations and rounds")
    options = parser.parse_args()
    torch.set_num_threads(1)
    scale = 4 if options.quick else 1
    rounds = max(9, options.rounds // scale)
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, 1 thread")
    measure(
        "(a) MLP 784-256-10 training step, a tensor it never writes armed",
        make_mlp_step(),
        torch.zeros(256, 784),
        12 // scale,
        rounds,
    )
    other = torch.nn.Linear(4, 4)
    measure(
        "(a') MLP training step, a parameter of another model armed",
        make_mlp_step(),
        other.weight,
        12 // scale,
        rounds,
    )
    measure(
        "(c) scalar model fit (in-place SGD by hand), a tensor it never writes armed",
        make_scalar_autograd_loop(),
        torch.zeros(1),
        200 // scale,
        rounds,
    )


if __name__ == "__main__":
    main()
