"""DDP gradient accumulation with ``no_sync()``, and what DDP accepts (torchrun, 2 ranks).

Under ``no_sync()`` each rank keeps its own gradient; the next backward outside it leaves the
mean of the ranks' accumulated gradients. An unused parameter keeps no gradient.
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.unused = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def gathered(value: torch.Tensor) -> list[torch.Tensor]:
    parts = [torch.empty_like(value) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, value)
    return parts


local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
rank = dist.get_rank()
device = torch.device(f"cuda:{local_rank}")
model = DDP(
    Net().to(device),
    device_ids=[local_rank],
    output_device=local_rank,
    find_unused_parameters=True,
    broadcast_buffers=False,
    static_graph=False,
    gradient_as_bucket_view=True,
)
batches = [torch.randn(3, 4, device=device) * (rank + 1) for _ in range(2)]

with model.no_sync():
    model(batches[0]).sum().backward()
local = model.module.fc.weight.grad.clone()
differ = not torch.equal(*gathered(local))
model(batches[1]).sum().backward()  # synchronises the accumulated gradients
grad = model.module.fc.weight.grad
model.module.fc.weight.grad = None
with model.no_sync():
    model(batches[1]).sum().backward()
expected = torch.stack(gathered(local + model.module.fc.weight.grad)).mean(dim=0)
print(
    f"rank {rank}: no_sync grads differ {differ}, synced grad is the mean "
    f"{torch.allclose(grad, expected)}, unused grad {model.module.unused.weight.grad}"
)
# (a barrier first: torch's gloo can abort a rank at exit ("terminate called without an
# active exception") when the other rank tears its group down first: ~1 run in 5 on a
# loaded machine)
dist.barrier()
dist.destroy_process_group()
