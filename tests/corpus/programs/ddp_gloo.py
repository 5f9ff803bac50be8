"""DistributedDataParallel on the gloo backend, modelled on the PyTorch tutorial "Getting
Started with Distributed Data Parallel" (``init_process_group``, ``DDP(model)``,
``DistributedSampler``, ``destroy_process_group``), in one process (rank 0 of world size 1)
rendezvousing through a ``FileStore`` in a temporary folder. On ``torch.device("cpu")``: gloo
and DDP do not know the stand-in accelerator.

Bug variants (first argument):
- ``loss-from-list``: the micro-batch losses collected in a list and summed as
  ``torch.tensor(losses).sum()``, which copies their values and drops their history.
- ``no-zero-grad``: the loop never calls ``optimizer.zero_grad()``.
"""

import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

BUG = sys.argv[1] if len(sys.argv) > 1 else ""


def train(rank: int, world_size: int, store_path: str) -> None:
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    torch.manual_seed(0)
    x = torch.randn(128, 10)
    y = torch.randn(128, 1) + x[:, :1]
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=0)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    ddp_model = DDP(nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 1)))
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.05)

    for epoch in range(2):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            if BUG != "no-zero-grad":
                optimizer.zero_grad()
            outputs = ddp_model(xb)
            losses = [F.mse_loss(outputs[i : i + 16], yb[i : i + 16]) for i in (0, 16)]
            if BUG == "loss-from-list":
                loss = torch.tensor(losses).sum()
            else:
                loss = torch.stack(losses).sum()
            loss.backward()  # bug[loss-from-list]: grad-lost
            optimizer.step()  # bug[no-zero-grad]: missing-zero-grad
        reduced = loss.detach().clone()
        dist.all_reduce(reduced)
        if rank == 0:
            print(f"epoch {epoch}: loss {reduced.item() / world_size:.4f}")
    dist.destroy_process_group()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        train(0, 1, os.path.join(tmp, "store"))


if __name__ == "__main__":
    main()
