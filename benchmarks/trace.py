"""Per-line trace overhead beside TorchSnooper's, in one run: ``python benchmarks/trace.py``.

Times the workloads of :mod:`workloads` (the engine benchmark's) plain, traced by tensor-dap's
tracer as ``tensor-dap trace`` runs it (the per-line tracer with the default rules' watch, output
to a file; trace store writes happen at flush time, off the measured path) and by
``torchsnooper.snoop(output=file)``, interleaved round after round, and prints the median ratio
to plain and ours / TorchSnooper's *overhead* (ratio - 1). Target: ours ≤ 1/3 of TorchSnooper's.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from typing import Any, Callable, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import interleaved_ratios  # noqa: E402
from workloads import make_mlp_step, make_scalar_autograd_loop, make_scalar_loop  # noqa: E402

from tensor_dap.agent.engine import Watch  # noqa: E402
from tensor_dap.linetrace.backends import make_backend  # noqa: E402
from tensor_dap.linetrace.output import Sink  # noqa: E402
from tensor_dap.linetrace.store import LineStore  # noqa: E402
from tensor_dap.linetrace.tracer import Tracer  # noqa: E402

Run = Callable[[int], None]
_DIR = tempfile.mkdtemp(prefix="tensor-dap-trace-bench-")


def ours(fn: Run, rules: str = "default") -> Run:
    """``tensor-dap trace``'s machinery around ``fn`` (the workload file counts as user code)."""

    def run(n: int) -> None:
        tracer = Tracer(Sink(os.path.join(_DIR, "ours.log"), append=False), store=LineStore())
        backend = make_backend(tracer)
        with Watch(rules=rules, on_finding=tracer.finding):
            backend.start()
            try:
                fn(n)
            finally:
                backend.stop()
                tracer.close()

    return run


def torchsnooper_mode() -> Optional[Callable[[Run], Run]]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torchsnooper
    except Exception as error:
        print(f"(TorchSnooper not measured: {type(error).__name__}: {error})")
        return None
    sink = open(os.path.join(_DIR, "torchsnooper.log"), "w")  # noqa: SIM115

    def wrap(fn: Run) -> Run:
        return torchsnooper.snoop(output=sink)(fn)

    return wrap


def measure(name: str, fn: Run, n: int, rounds: int) -> dict[str, Any]:
    modes = {
        "tensor-dap trace": ours(fn),
        "  (tracer alone, --rules none)": ours(fn, "none"),
    }
    snooper = torchsnooper_mode()
    if snooper is not None:
        modes["TorchSnooper"] = snooper(fn)
    plain, medians = interleaved_ratios(fn, modes, n, rounds)
    print(f"\n{name}: plain {plain * 1e6:.1f} µs per iteration")
    for label, ratio in medians.items():
        print(f"  {label:32s} {ratio:6.2f}×")
    if "TorchSnooper" in medians:
        for label in ("tensor-dap trace", "  (tracer alone, --rules none)"):
            share = (medians[label] - 1) / max(medians["TorchSnooper"] - 1, 1e-9)
            verdict = "meets" if share <= 1 / 3 else "misses"
            print(f"  {label.strip()} / TorchSnooper overhead: {share:.2f} ({verdict} ≤ 0.33)")
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    options = parser.parse_args()
    torch.set_num_threads(1)
    scale = 5 if options.quick else 1
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, 1 thread; logs in {_DIR}")
    measure(
        "(a) MLP 784-256-10, batch 64, training step", make_mlp_step(), 60 // scale, options.rounds
    )
    measure(
        "(b) loop of scalar-sized tensor ops", make_scalar_loop(), 3000 // scale, options.rounds
    )
    measure(
        "(c) scalar model fit with autograd (w * x + b, backward, SGD by hand)",
        make_scalar_autograd_loop(),
        2000 // scale,
        options.rounds,
    )


if __name__ == "__main__":
    main()
