"""What each part of a watch adds to a training step: ``python benchmarks/step_ablation.py``.

The MLP step of :mod:`workloads` under the default rules with the memory books (``check
--memory``), and under the same watch with parts of it taken out, each timed side by side with
plain runs (:func:`timing.interleaved_ratios`, CPU time, one thread):

- ``machinery``: the watch with every rule hook of its plans and every optimizer subscriber
  removed: what the mode's dispatch, the per-call-site counting, the optimizer step-aside and
  the ``zero_grad`` wrapper cost with no rule looking at anything;
- ``machinery + op hooks``: the plans' ``before``/``after`` hooks back (the rules and books run on
  each op and each ``backward()``), the optimizer subscribers still removed;
- ``machinery + optimizer hooks``: the subscribers back (what rules and books do at each
  ``step()`` and ``zero_grad()``), the plans' hooks still removed;
- ``without books' op hooks``: everything but the books' hook on each op and ``backward()``;
- ``without backward() rule hooks``: everything but the rules' hooks on ``backward()``.

The parts are removed from copies of the watch's plans (which watches share) and of the
optimizer subscribers' table, put back after each timed run: the code is the engine's own.
What a part adds is its row's ratio against the one it was taken out of; the sum of the parts
may differ from the whole (caches, branch predictors: a step's own kernels run slower after
more Python ran between them). ``--rounds`` sets the number of side-by-side rounds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from overhead import _NoopMode  # noqa: E402
from timing import Resumed, interleaved_ratios  # noqa: E402
from workloads import make_mlp_step  # noqa: E402

import tensor_dap  # noqa: E402
from tensor_dap.agent import optimizers  # noqa: E402
from tensor_dap.agent.memory import PLAN_ID as BOOKS  # noqa: E402
from tensor_dap.agent.plans import PASS  # noqa: E402

Run = Callable[[int], None]
#: (function's name, plan) -> the plan to run with
PlanEdit = Callable[[str, tuple[Any, ...]], tuple[Any, ...]]


Keep = Callable[[str, str], bool]


def _without(keep_before: Keep, keep_after: Keep) -> PlanEdit:
    """A plan edit keeping the ``before`` hooks ``keep_before(function, rule)`` says to keep,
    and the ``after`` hooks ``keep_after`` says to keep."""

    def edit(name: str, plan: tuple[Any, ...]) -> tuple[Any, ...]:
        info, before, after, observers = plan[:4]
        before = tuple(hook for hook in before if keep_before(name, hook[0]))
        after = tuple(hook for hook in after if keep_after(name, hook[0]))
        return (info, before, after, observers, *plan[4:])

    return edit


def _none(name: str, rule: str) -> bool:
    return False


def _all(name: str, rule: str) -> bool:
    return True


def _not_books(name: str, rule: str) -> bool:
    return rule != BOOKS


def _not_backward_rules(name: str, rule: str) -> bool:
    return rule == BOOKS or not name.endswith("backward")


def _watched(
    fn: Run, edit: Optional[PlanEdit] = None, subscribers: bool = True, memory: bool = True
) -> Run:
    """``fn`` under one watch, resumed around each run, with its plans edited by ``edit`` and
    the optimizer subscribers removed unless ``subscribers`` (the start and stop untimed, as in
    ``overhead.py``)."""
    watch = tensor_dap.watch(memory=memory)
    watch.start()
    fn(20)  # plan every op of the step
    planned = dict(watch._plans)
    watch.stop()
    if edit is not None:
        for func, plan in planned.items():
            if plan is not PASS and isinstance(plan, tuple) and len(plan) >= 4:
                planned[func] = edit(getattr(func, "__qualname__", repr(func)), plan)

    def start() -> None:
        watch.start()
        if edit is not None:
            watch._plans = planned
        if not subscribers:  # (stop() indexes the subscribers left again)
            optimizers._callbacks = {}

    return Resumed(fn, start, watch.stop)


def _noop(fn: Run) -> Run:
    def run(n: int) -> None:
        with _NoopMode():
            fn(n)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    options = parser.parse_args()
    torch.set_num_threads(1)
    fn = make_mlp_step()
    runs = {
        "no-op TorchFunctionMode (floor)": _noop(fn),
        "default rules": _watched(fn, memory=False),
        "default rules + memory books": _watched(fn),
        "machinery": _watched(fn, _without(_none, _none), subscribers=False),
        "machinery + op hooks": _watched(fn, _without(_all, _all), subscribers=False),
        "machinery + optimizer hooks": _watched(fn, _without(_none, _none)),
        "without books' op hooks": _watched(fn, _without(_not_books, _not_books)),
        "without backward() rule hooks": _watched(fn, _without(_not_backward_rules, _all)),
    }
    plain, ratios = interleaved_ratios(fn, runs, 12, options.rounds, time.process_time)
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, 1 thread")
    print(f"MLP 784-256-10, batch 64, training step: plain {plain * 1e6:.0f} µs")
    for label, ratio in ratios.items():
        print(f"  {label:32s} {ratio:6.3f}×  ({(ratio - 1) * plain * 1e6:+5.0f} µs)")


if __name__ == "__main__":
    main()
