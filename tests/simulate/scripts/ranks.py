"""torchrun ranks, each on its own simulated device, NCCL asked for, a collective on CUDA."""

import os

import torch
import torch.distributed as dist

local_rank = int(os.environ.get("LOCAL_RANK", 0))
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
device = torch.device(f"cuda:{local_rank}")
x = torch.ones(3, device=device)
assert str(x.device) == f"cuda:{local_rank}", x.device
dist.all_reduce(x)
assert x.is_cuda and torch.equal(x, torch.full((3,), 2.0, device=device))
loss = torch.zeros(3)
loss = loss + x  # BUG
dist.barrier()
dist.destroy_process_group()
