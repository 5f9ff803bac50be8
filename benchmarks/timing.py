"""Side-by-side timing shared by the benchmarks: every mode against plain, round after round.

Each round times plain execution right before each mode, so drift on a busy machine hits both
sides of a ratio alike; the medians of the per-round ratios are what the benchmarks print.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

Run = Callable[[int], None]


def _time(fn: Run, n: int) -> float:
    start = time.perf_counter()
    fn(n)
    return time.perf_counter() - start


def interleaved_ratios(
    fn: Run, runs: dict[str, Run], n: int, rounds: int
) -> tuple[float, dict[str, float]]:
    """Plain seconds per iteration (median) and each mode's median ratio to plain."""
    fn(max(1, n // 5))
    for run in runs.values():
        run(max(1, n // 5))  # warm up every path
    ratios: dict[str, list[float]] = {label: [] for label in runs}
    plain_times = []
    for _ in range(rounds):
        for label, run in runs.items():
            plain = _time(fn, n)
            plain_times.append(plain)
            ratios[label].append(_time(run, n) / plain)
    medians = {label: statistics.median(values) for label, values in ratios.items()}
    return statistics.median(plain_times) / n, medians
