"""What ``--simulate cuda`` costs, side by side in one run: ``python benchmarks/simulate.py``.

The MLP training step of :mod:`workloads` and an MNIST-sized CNN's, written for CUDA
(``device="cuda"``), timed under the simulation against the same step on the CPU, with and
without the watch's default rules (what ``tensor-dap check`` runs). The simulation is
process-wide, so each side runs in a child process of its own; the rounds alternate the sides
(drift on a busy machine hits both alike), each child times its steps in CPU time (one intra-op
thread) after a warm-up, and the median ratio is reported.
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
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
SIDES = ("cpu", "simulated", "cpu + watch", "simulated + watch")
WORKLOADS = {"mlp": "MLP 784-256-10", "cnn": "MNIST-sized CNN (2 conv, Adam)"}


def make_cnn_step(device: str, batch: int = 64) -> Callable[[int], None]:
    """An MNIST-sized CNN training step (two conv layers, Adam) on ``device``, ``n`` times."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10),
    ).to(device)  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(batch, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def cnn_steps(n: int) -> None:
        for _ in range(n):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()

    return cnn_steps


def _child(side: str, steps: int, workload: str) -> None:
    sys.path.insert(0, HERE)
    simulated = side.startswith("simulated")
    if simulated:
        from tensor_dap import simulate

        simulate.start("cuda")
    import torch
    from workloads import make_mlp_step

    import tensor_dap

    torch.set_num_threads(1)  # CPU time of one thread: comparable on a busy machine

    device = "cuda" if simulated else "cpu"
    run = make_mlp_step(device=device) if workload == "mlp" else make_cnn_step(device)
    watch = tensor_dap.watch(rules="default") if side.endswith("watch") else None
    if watch is not None:
        watch.start()
    run(5)  # warm-up: first ops, plans
    start = time.process_time()
    run(steps)
    print(json.dumps({"seconds": (time.process_time() - start) / steps}))
    if watch is not None:
        watch.stop()


def _time(side: str, steps: int, workload: str) -> float:
    command = [sys.executable, __file__, "--child", side, "--steps", str(steps)]
    command += ["--workload", workload]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--workload", choices=WORKLOADS, help="one workload (default: both)")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        _child(options.child, options.steps, options.workload or "mlp")
        return
    for workload in [options.workload] if options.workload else list(WORKLOADS):
        _compare(workload, options.rounds, options.steps)


def _compare(workload: str, rounds: int, steps: int) -> None:
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for _ in range(rounds):
        for side in SIDES:
            times[side].append(_time(side, steps, workload))
    median = {side: statistics.median(values) for side, values in times.items()}
    print(f"{WORKLOADS[workload]} training step, batch 64, median of {rounds} rounds")
    for side in SIDES:
        print(f"  {side:<18} {median[side] * 1000:8.2f} ms/step")
    print(f"  simulated / cpu:                 {median['simulated'] / median['cpu']:.2f}x")
    ratio = median["simulated + watch"] / median["cpu + watch"]
    print(f"  simulated + watch / cpu + watch: {ratio:.2f}x")


if __name__ == "__main__":
    main()
