"""Engine overhead, measured side by side in one run: ``python benchmarks/overhead.py``.

Times each workload of :mod:`workloads` plain and under each mode, in many short rounds that
pair a plain run with each mode's (so drift on a busy machine hits both sides of a ratio alike),
in CPU time, and reports the median ratio to plain execution:

- ``no-op TorchFunctionMode (floor)``: what any engine built on a mode pays at least;
- ``watch, no rules``: ``tensor_dap.watch(rules=[])`` (installs nothing);
- ``watch, default rules``, ``watch, default rules + memory books`` (``check --memory``) and
  ``watch, default rules + trace`` (what ``tensor-dap check`` runs),
  in the steady state of a long run: one watch per workload, resumed (``start()``) around each
  timed run and stopped after it, so plans and per-call-site counts carry over as in a program
  that runs one watch over many steps (the start and stop, ~0.2 ms, are not timed: a long run
  pays them once; the first iteration after a start, some 50 µs slower than the next ones in an
  MLP step, is timed);
- ``new watch per run, default rules``: a watch made, started and stopped around each timed run,
  which also pays what a watch pays once (its start, the first 8 hits of each call site sampled
  in full, its stop). That one-off cost is also printed in ms: the median difference between
  a new watch and a resumed one over 8 iterations, timed in pairs;
- ``anomaly mode``: ``torch.autograd.detect_anomaly()``;
- ``TorchSnooper``: ``@torchsnooper.snoop()`` on the workload, output to a file (when the
  ``torchsnooper`` package imports; ``pip install -e .[bench]``), in a pass of its own.

``--device cuda`` times the MLP step alone on a GPU, in wall time with the device synchronized
at the end of each run (kernels included).

As in a program, the C operator shadows (``tensor_dap/agent/operator_shadows.py``) and the
``zero_grad`` wrapper (``tensor_dap/agent/optimizers.py``) stay installed once the first watch
installed them; plain runs after it pass through them (one C check per operator, about 1% of a
scalar op; one check per ``zero_grad()``), so the ratios below understate the watch by about
that.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, Optional

import torch
from torch.overrides import TorchFunctionMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import Resumed, interleaved_ratios, time_run  # noqa: E402
from workloads import make_mlp_step, make_scalar_autograd_loop, make_scalar_loop  # noqa: E402

import tensor_dap  # noqa: E402
from tensor_dap.agent.recorder import TraceRecorder  # noqa: E402

Mode = Callable[[Callable[[int], None]], Callable[[int], None]]


def _within(make_context: Callable[[], Any]) -> Mode:
    def wrap(fn: Callable[[int], None]) -> Callable[[int], None]:
        def run(n: int) -> None:
            with make_context():
                fn(n)

        return run

    return wrap


def _torchsnooper() -> Optional[Mode]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torchsnooper
    except Exception as error:  # pkg_resources missing with setuptools>=81, not installed...
        print(f"(TorchSnooper not measured: {type(error).__name__}: {error})")
        return None
    sink = open(os.path.join(tempfile.mkdtemp(), "snoop.log"), "w")  # noqa: SIM115

    def wrap(fn: Callable[[int], None]) -> Callable[[int], None]:
        return torchsnooper.snoop(output=sink)(fn)

    return wrap


def _resumed(make_watch: Callable[[], Any]) -> Mode:
    """One watch per workload, started around each run (untimed): the steady state of a long
    run."""

    def wrap(fn: Callable[[int], None]) -> Callable[[int], None]:
        watch = make_watch()
        return Resumed(fn, watch.start, watch.stop)

    return wrap


def modes() -> dict[str, Mode]:
    """The cheap modes, timed together (TorchSnooper is timed on its own: see measure)."""
    return {
        "no-op TorchFunctionMode (floor)": _within(_NoopMode),
        "watch, no rules": _within(lambda: tensor_dap.watch(rules=[])),
        "watch, default rules": _resumed(lambda: tensor_dap.watch()),
        "watch, default rules + memory books": _resumed(lambda: tensor_dap.watch(memory=True)),
        "watch, default rules + trace": _resumed(
            lambda: tensor_dap.watch(recorder=TraceRecorder())
        ),
        "new watch per run, default rules": _within(lambda: tensor_dap.watch()),
        "anomaly mode": _within(lambda: _quiet_anomaly()),
    }


class _NoopMode(TorchFunctionMode):
    """The cheapest possible mode: what any TorchFunctionMode-based engine pays at least."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        return func(*args, **kwargs) if kwargs else func(*args)


@contextlib.contextmanager
def _quiet_anomaly() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.detect_anomaly(check_nan=False):
            yield


def measure(
    name: str,
    fn: Callable[[int], None],
    n: int,
    rounds: int,
    clock: Callable[[], float] = time.process_time,
) -> None:
    """``clock``: CPU time by default (the workloads run in this process and wait on nothing);
    wall time for a GPU's, whose runs end waiting for the device."""
    wrapped = {label: wrap(fn) for label, wrap in modes().items()}
    plain, medians = interleaved_ratios(fn, wrapped, n, rounds, clock)
    # TorchSnooper in a pass of its own, still side by side with plain: its tens of times
    # slower runs and their output would otherwise weigh on the runs that follow them
    snooper = _torchsnooper()
    if snooper is not None:
        _, snooped = interleaved_ratios(
            fn, {"TorchSnooper": snooper(fn)}, n, max(3, rounds // 5), clock
        )
        medians.update(snooped)
    print(f"\n{name}: plain {plain * 1e6:.1f} µs per iteration")
    for label, ratio in medians.items():
        print(f"  {label:34s} {ratio:6.2f}×")
    print(f"  (a new watch costs {_one_off_cost(fn, rounds) * 1e3:.2f} ms once)")


def measure_on(device: str, n: int, rounds: int) -> None:
    """The MLP step on an accelerator: each run ends waiting for the device, so the ratios are
    of wall time, kernels included (a small model's step is bound by launching them)."""
    step = make_mlp_step(device=device)
    backend = getattr(torch, torch.device(device).type)

    def synchronized(iterations: int) -> None:
        step(iterations)
        backend.synchronize()

    name = f"(a) MLP 784-256-10, batch 64, training step on {device}"
    measure(name, synchronized, n, rounds, time.perf_counter)


def _one_off_cost(fn: Callable[[int], None], rounds: int) -> float:
    """Seconds a new watch costs more than a resumed one over 8 iterations (the new one samples
    every call site in full there), median of pairs timed one after the other."""
    resumed = _resumed(lambda: tensor_dap.watch())(fn)
    new = _within(lambda: tensor_dap.watch())(fn)
    resumed(8)
    differences = [
        time_run(new, 8, time.process_time) - time_run(resumed, 8, time.process_time)
        for _ in range(rounds)
    ]
    return statistics.median(differences)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # many short rounds: on a shared machine whose speed drifts within a second, the median of
    # many short side-by-side pairs is steadier than that of a few long ones
    parser.add_argument("--rounds", type=int, default=45)
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument(
        "--device", default="cpu", help="only the MLP step, on this device (cuda), in wall time"
    )
    options = parser.parse_args()
    torch.set_num_threads(1)
    scale = 5 if options.quick else 1
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, 1 thread")
    if options.device != "cpu":
        measure_on(options.device, 12 // scale, options.rounds)
        return
    measure(
        "(a) MLP 784-256-10, batch 64, training step", make_mlp_step(), 12 // scale, options.rounds
    )
    measure("(b) loop of scalar-sized tensor ops", make_scalar_loop(), 600 // scale, options.rounds)
    measure(
        "(c) scalar model fit with autograd (w * x + b, backward, SGD by hand)",
        make_scalar_autograd_loop(),
        200 // scale,
        options.rounds,
    )


if __name__ == "__main__":
    main()
