"""TorchSnooper's example: a helper allocates its output with `torch.zeros(6)` on the CPU.

The mask and the source values come from the GPU, so `masked_scatter_` gets tensors on
two devices. PyTorch raises "RuntimeError: Expected all tensors to be on the same device ..."
naming cpu and cuda:0 (on the CPU: `tensor-dap check --simulate cuda`).
"""

import torch

use_gpu = torch.cuda.is_available()
device = torch.device("cuda:0") if use_gpu else torch.device("cpu")
torch.backends.cudnn.benchmark = use_gpu


def myfunc(mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    y = torch.zeros(6)
    y.masked_scatter_(mask, x)  # expect: device-mismatch
    return y


mask = torch.tensor([0, 1, 0, 1, 1, 0], dtype=torch.bool, device=device)
source = torch.tensor([1.0, 2.0, 3.0], device=device)
print(myfunc(mask, source))
