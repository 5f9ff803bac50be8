"""Two-rank DDP training where only rank 1 hits a device mismatch, and hides it.

Run it with torchrun (the `gloo` backend, so it runs on CPUs):

    tensor-dap check -- torchrun --standalone --nproc_per_node 2 sample_project/ddp_rank_mismatch.py

DDP trains on the CPU on every rank. Rank 1 alone also drives its GPU (`cuda:1`, or the one
GPU) and moves its batch loss there before adding it to a metric every rank keeps on the CPU;
the addition raises "Expected all tensors to be on the same device", which a `try` meant to keep
metrics from ever stopping training swallows. The job succeeds; rank 1 silently takes the slow
path at every step. tensor-dap reports the line, labelled `rank 1`. Without GPUs, add
`--simulate cuda` after `check`: each rank then simulates its own CUDA device.
"""

import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

GPU = int(os.environ.get("LOCAL_RANK", 0)) % max(torch.cuda.device_count(), 1)  # this rank's GPU


def main() -> None:
    if "RANK" not in os.environ:
        sys.exit(f"run with torchrun: torchrun --standalone --nproc_per_node 2 {sys.argv[0]}")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", GPU) if torch.cuda.is_available() else torch.device("cpu")
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    running = torch.zeros(1)  # the metric, on the CPU
    for _step in range(4):
        x = torch.randn(16, 4, generator=generator)
        y = x.sum(dim=1, keepdim=True)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        batch_loss = loss.detach()
        if rank == 1:  # this rank also drives its GPU
            batch_loss = batch_loss.to(device)
        try:
            running = running + batch_loss  # expect[rank 1]: device-mismatch
        except RuntimeError:  # metrics must never stop training
            running = running + batch_loss.item()
    weight = model.module.weight.detach().flatten().tolist()
    print(f"rank {rank}: running loss {running.item():.5f} weight {[round(w, 5) for w in weight]}")
    # (a barrier first: torch's gloo can abort a rank at exit ("terminate called without an
    # active exception") when the other rank tears its group down first: ~1 run in 5 on a
    # loaded machine)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
