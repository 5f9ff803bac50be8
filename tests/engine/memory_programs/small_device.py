"""A matmul on a device with little memory left: the test allocator (a TorchDispatchMode)
raises torch.OutOfMemoryError as CUDA's caching allocator does, before the result exists."""

import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class SmallDevice(TorchDispatchMode):
    """Refuses a matmul whose result would take more than ``budget`` bytes."""

    def __init__(self, budget: int) -> None:
        super().__init__()
        self.budget = budget

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
            a, b = args[-2], args[-1]
            wanted = a.shape[0] * b.shape[1] * a.element_size()
            if wanted > self.budget:
                raise torch.OutOfMemoryError(
                    f"out of memory. Tried to allocate {wanted} bytes (test allocator: "
                    f"{self.budget} bytes free)"
                )
        return func(*args, **(kwargs or {}))


weights = torch.randn(512, 512)
batches = [torch.randn(256, 512) for _ in range(4)]


def forward(x):
    return x @ weights


with SmallDevice(budget=1 << 20):
    outputs = [forward(b) for b in batches[:2]]
    print("small batches ok", flush=True)
    large = torch.randn(4096, 512)
    if len(sys.argv) > 1 and sys.argv[1] == "catch":
        try:
            forward(large)
        except torch.OutOfMemoryError:
            print("caught, retrying in halves", flush=True)
            outputs += [forward(half) for half in large.split(256)]
        print("done", len(outputs))
    else:
        forward(large)
