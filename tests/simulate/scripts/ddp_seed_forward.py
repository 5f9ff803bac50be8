"""Seed under DDP: a CPU tensor made inside the wrapped model's forward (torchrun, 2 ranks)."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.embed(x))
        scale = torch.linspace(0.5, 1.5, hidden.shape[1])  # per-feature weights, on the CPU
        return self.head(hidden * scale)  # BUG


local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
model = DDP(Net().cuda(), device_ids=[local_rank])
try:
    model(torch.randn(2, 4)).sum().backward()
except RuntimeError as error:  # what a GPU raises too
    print(f"rank {dist.get_rank()}: {str(error).splitlines()[0]}")
# (a barrier first: torch's gloo can abort a rank at exit ("terminate called without an
# active exception") when the other rank tears its group down first: ~1 run in 5 on a
# loaded machine)
dist.barrier()
dist.destroy_process_group()
