"""What each Python hook of a watch costs in a training step: ``python benchmarks/step_hooks.py``.

``step_phases.py`` says which phase of the MLP step of :mod:`workloads` a watch slows; this says
which of the watch's own hooks the time goes to. Each hook the engine calls per step outside
its C per-op path (the rules' ``before``/``after`` at ``backward()``, the optimizer step and
``zero_grad()`` hooks and their subscribers, the memory books' per-op step and their
``backward()`` hooks) is wrapped in a timer, in place, and the MLP step runs under
``watch(memory=True)``; per hook it prints the calls per step and the median and mean µs of one
call, timed where it runs: between the step's large matrix products, whose data leave little of
the interpreter's in the CPU's caches, a hook costs several times what it costs in a tight loop.

Measured in 2026-12 (2-core machine): every hook is 1–20 µs, together about 60 µs a step (plain
step 700–800 µs); no single one dominates. See docs/memory.md (cost).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from typing import Any, Callable

import torch
from torch import nn

from tensor_dap.agent import frames, kept_roots, memory, native, optimizers
from tensor_dap.agent.rules import grad_lost, graph_kept, inplace_saved

_spent: defaultdict[str, list[int]] = defaultdict(list)


def _timed(name: str, hook: Callable[..., Any]) -> Callable[..., Any]:
    clock = time.perf_counter_ns

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return hook(*args, **kwargs)
        finally:
            _spent[name].append(clock() - start)

    return timed


def _wrap_module_hooks() -> None:
    """Before the watch plans: its plans and the optimizer hooks hold what these names are."""
    graph_kept.before = _timed("graph-kept before (backward)", graph_kept.before)
    kept_roots.check = _timed("  of which kept_roots.check", kept_roots.check)
    grad_lost.before = _timed("grad-lost before (backward)", grad_lost.before)
    inplace_saved.after = _timed("inplace-saved after (backward)", inplace_saved.after)
    optimizers._pre_step = _timed("optimizer pre-step hook", optimizers._pre_step)
    optimizers._post_step = _timed("optimizer post-step hook", optimizers._post_step)
    memory.PLAN_HOOKS.after = _timed("books: per op (+ after backward)", memory.PLAN_HOOKS.after)
    memory.PLAN_HOOKS.before = _timed("books: backward() line", memory.PLAN_HOOKS.before)
    if native.fastpath is not None:  # the C books call these two by reference
        native.fastpath.configure_books(
            frames._KIND,
            memory._PATHS,
            memory._DEVICE_NAMES,
            frames.USER,
            frames.LIBRARY,
            memory._expired,
            memory._free_weak_ref,
            memory.before_backward,
            _timed("  books: after backward (.grad)", memory.after_backward),
            memory._GRAD,
        )


def _wrap_subscribers() -> None:
    """The optimizer subscribers the watch's start registered."""
    optimizers._callbacks = {
        kind: tuple(
            _timed(f"  {kind}: {callback.__module__.rsplit('.', 1)[-1]} #{i}", callback)
            for i, callback in enumerate(callbacks)
        )
        for kind, callbacks in optimizers._callbacks.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    options = parser.parse_args()
    torch.set_num_threads(1)
    _wrap_module_hooks()
    import tensor_dap

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))

    def steps(n: int) -> float:
        start = time.perf_counter_ns()
        for _ in range(n):
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
        return (time.perf_counter_ns() - start) / n / 1e3

    plain = steps(100)
    with tensor_dap.watch(memory=True):
        _wrap_subscribers()
        steps(50)
        _spent.clear()
        watched = steps(options.steps)
    plain = min(plain, steps(options.steps // 4))
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, 1 thread")
    print(f"step: plain {plain:.0f} µs, default rules + books {watched:.0f} µs (timers included)")
    print(f"{'hook':42s} {'calls/step':>10s} {'median µs':>10s} {'mean µs':>9s}")
    for name, spent in _spent.items():
        calls = len(spent) / options.steps
        median, mean = statistics.median(spent) / 1e3, statistics.mean(spent) / 1e3
        print(f"{name:42s} {calls:10.1f} {median:10.2f} {mean:9.2f}")


if __name__ == "__main__":
    main()
