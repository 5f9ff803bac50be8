"""torchrun ranks, each on its own simulated device, NCCL asked for."""

import os

import torch
import torch.distributed as dist

local_rank = int(os.environ.get("LOCAL_RANK", 0))
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
device = torch.device(f"cuda:{local_rank}")
x = torch.ones(3, device=device)
assert str(x.device) == f"cuda:{local_rank}", x.device
loss = torch.zeros(3)
loss = loss + x  # BUG
dist.barrier()
dist.destroy_process_group()
