"""Engine overhead on a two-rank DDP training step: ``python benchmarks/ddp.py``.

Two processes (``gloo``, CPU, one thread each) train an MLP 784-256-10 at batch 64 wrapped in
``DistributedDataParallel``; every step all-reduces the gradients. Each rank times the step
plain and under the watch the agent installs in every rank under ``tensor-dap check --
torchrun ...`` (default rules; default rules + the trace recorder), interleaved round after
round (:mod:`timing`) — both ranks run the same sequence, so the all-reduces stay in lockstep.
``watch, no rules`` installs nothing: its distance from 1.00× is the noise of the machine.
Rank 0 prints the median ratios to plain, side by side; rank 1's are printed too, since a rank
waits for the slower one at every all-reduce.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import interleaved_ratios  # noqa: E402

import tensor_dap  # noqa: E402
from tensor_dap.agent.recorder import TraceRecorder  # noqa: E402

WORLD = 2


def make_ddp_step(batch: int = 64) -> Callable[[int], None]:
    torch.manual_seed(0)
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(batch, 784)
    y = torch.randint(0, 10, (batch,))

    def ddp_steps(n: int) -> None:
        for _ in range(n):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()

    return ddp_steps


def _watched(fn: Callable[[int], None], rules: str, trace: bool) -> Callable[[int], None]:
    def run(n: int) -> None:
        recorder = TraceRecorder() if trace else None
        with tensor_dap.watch(rules=rules or [], recorder=recorder):
            fn(n)

    return run


def _rank(rank: int, port: int, steps: int, rounds: int, results: Any) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    try:
        step = make_ddp_step()
        modes = {
            "watch, no rules (noise floor)": _watched(step, "", trace=False),
            "watch, default rules": _watched(step, "default", trace=False),
            "watch, default rules + trace": _watched(step, "default", trace=True),
        }
        plain, ratios = interleaved_ratios(step, modes, steps, rounds)
        results.put((rank, plain, ratios))
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=40)
    options = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.get_context("spawn")
    results = context.Queue()
    mp.start_processes(
        _rank,
        args=(port, options.steps, options.rounds, results),
        nprocs=WORLD,
        join=True,
        start_method="spawn",
    )
    rows = sorted(results.get() for _ in range(WORLD))
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, {WORLD} ranks, gloo")
    print("DDP MLP 784-256-10, batch 64, training step (median ratio to plain, per rank)")
    labels = list(rows[0][2])
    print(f"  {'':32s} " + " ".join(f"rank {rank:<3d}" for rank, _, _ in rows))
    print(f"  {'plain, ms per step':32s} " + " ".join(f"{p * 1e3:8.2f}" for _, p, _ in rows))
    for label in labels:
        print(f"  {label:32s} " + " ".join(f"{r[label]:7.2f}×" for _, _, r in rows))


if __name__ == "__main__":
    main()
