"""DDP training written the usual way for GPUs (torchrun, NCCL, DistributedSampler).

Each rank seeds its model differently: DDP's broadcast from rank 0 makes them equal, and the
averaged gradients (each rank sees its own shard of the data) keep them equal.
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.norm = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def main() -> None:
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    device = torch.device("cuda", local_rank)
    torch.manual_seed(rank)  # different initial weights on each rank
    model = DDP(Net().to(device), device_ids=[local_rank], output_device=local_rank)
    assert isinstance(model, DDP) and isinstance(model, nn.parallel.DistributedDataParallel)
    assert all(key.startswith("module.") for key in model.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(64, 8, generator=torch.Generator().manual_seed(0)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler, pin_memory=True)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for (x,) in loader:
            x = x.to(device, non_blocking=True)
            loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    if rank == 0:
        print(f"loss {loss.item():.4f}")
    total = sum(p.detach().double().sum().item() for p in model.module.parameters())
    print(f"rank {rank} parameters {total:.10f}")
    # (a barrier first: torch's gloo can abort a rank at exit ("terminate called without an
    # active exception") when the other rank tears its group down first: ~1 run in 5 on a
    # loaded machine)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
