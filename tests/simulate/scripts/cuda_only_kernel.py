"""A custom op with a CUDA kernel only: it cannot run on the CPU."""

import torch

lib = torch.library.Library("myext", "DEF")
lib.define("fused(Tensor x) -> Tensor")
lib.impl("fused", lambda x: x * 2, "CUDA")
x = torch.ones(3, device="cuda")
y = torch.ops.myext.fused(x)
print("not reached")
