"""TorchSnooper's example: a helper allocates its output with `torch.zeros(6)` on the CPU.

The mask and the source values come from the accelerator, so `masked_scatter_` gets tensors on
two devices. PyTorch raises "RuntimeError: Expected all tensors to be on the same device ..."
naming cpu and cuda:0 (`accel:0` on the stand-in accelerator).
"""

import torch

from tensor_dap.testing import pick_device

device = pick_device()


def myfunc(mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    y = torch.zeros(6)
    y.masked_scatter_(mask, x)  # expect: device-mismatch
    return y


mask = torch.tensor([0, 1, 0, 1, 1, 0], dtype=torch.bool, device=device)
source = torch.tensor([1.0, 2.0, 3.0], device=device)
print(myfunc(mask, source))
