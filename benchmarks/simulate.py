"""What ``--simulate cuda`` costs, side by side in one run: ``python benchmarks/simulate.py``.

The MLP training step of :mod:`workloads`, written for CUDA (``device="cuda"``), timed under
the simulation against the same step on the CPU, with and without the watch's default rules
(what ``tensor-dap check`` runs). The simulation is process-wide, so each side runs in a child
process of its own; the rounds alternate the sides (drift on a busy machine hits both alike),
each child times its steps in CPU time after a warm-up, and the median ratio is reported.
Target: at most 3x the CPU step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIDES = ("cpu", "simulated", "cpu + watch", "simulated + watch")


def _child(side: str, steps: int) -> None:
    sys.path.insert(0, HERE)
    simulated = side.startswith("simulated")
    if simulated:
        from tensor_dap import simulate

        simulate.start("cuda")
    from workloads import make_mlp_step

    import tensor_dap

    run = make_mlp_step(device="cuda" if simulated else "cpu")
    watch = tensor_dap.watch(rules="default") if side.endswith("watch") else None
    if watch is not None:
        watch.start()
    run(5)  # warm-up: first ops, plans
    start = time.process_time()
    run(steps)
    print(json.dumps({"seconds": (time.process_time() - start) / steps}))
    if watch is not None:
        watch.stop()


def _time(side: str, steps: int) -> float:
    command = [sys.executable, __file__, "--child", side, "--steps", str(steps)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        _child(options.child, options.steps)
        return
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for _ in range(options.rounds):
        for side in SIDES:
            times[side].append(_time(side, options.steps))
    median = {side: statistics.median(values) for side, values in times.items()}
    print(f"MLP 784-256-10 training step, batch 64, median of {options.rounds} rounds")
    for side in SIDES:
        print(f"  {side:<18} {median[side] * 1000:8.2f} ms/step")
    print(f"  simulated / cpu:                 {median['simulated'] / median['cpu']:.2f}x")
    ratio = median["simulated + watch"] / median["cpu + watch"]
    print(f"  simulated + watch / cpu + watch: {ratio:.2f}x")


if __name__ == "__main__":
    main()
