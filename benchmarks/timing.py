"""Side-by-side timing shared by the benchmarks: every mode against plain, round after round.

Each round times plain execution right before each mode, so drift on a busy machine hits both
sides of a ratio alike, and takes the modes in a new order, so no mode always runs after the same
one; the medians of the per-round ratios are what the benchmarks print.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from typing import Callable

Run = Callable[[int], None]


class Resumed:
    """``fn`` run between ``start()`` and ``stop()`` (a watch resumed around it): called, all
    three run; :func:`time_run` times ``fn`` alone, what a long run pays once being no part of
    its steady state."""

    def __init__(self, fn: Run, start: Callable[[], object], stop: Callable[[], object]) -> None:
        self.fn, self.start, self.stop = fn, start, stop

    def __call__(self, n: int) -> None:
        self.start()
        try:
            self.fn(n)
        finally:
            self.stop()


def time_run(fn: Run, n: int, clock: Callable[[], float]) -> float:
    """Seconds ``fn(n)`` takes on ``clock`` (of a :class:`Resumed`, its steady part)."""
    gc.collect()  # no run pays for the garbage of the one before it
    resumed = fn if isinstance(fn, Resumed) else None
    if resumed is not None:
        resumed.start()
        fn = resumed.fn
    try:
        start = clock()
        fn(n)
        return clock() - start
    finally:
        if resumed is not None:
            resumed.stop()


def interleaved_ratios(
    fn: Run,
    runs: dict[str, Run],
    n: int,
    rounds: int,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[float, dict[str, float]]:
    """Plain seconds per iteration (median) and each mode's median ratio to plain.

    ``clock``: wall time by default; ``time.process_time`` for single-process work that waits
    on nothing, where it leaves out the time the machine gave to other processes.
    """
    fn(max(1, n // 5))
    for run in runs.values():
        run(max(1, n // 5))  # warm up every path
    ratios: dict[str, list[float]] = {label: [] for label in runs}
    plain_times = []
    order = list(runs.items())
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        shuffle(order)  # no mode always follows the same one
        for label, run in order:
            plain = time_run(fn, n, clock)
            plain_times.append(plain)
            ratios[label].append(time_run(run, n, clock) / plain)
    medians = {label: statistics.median(values) for label, values in ratios.items()}
    return statistics.median(plain_times) / n, medians
