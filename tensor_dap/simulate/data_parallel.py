"""``nn.DataParallel`` on the one simulated device, as on a one-GPU machine.

Training scripts written for several GPUs wrap the model whenever CUDA is there
(``if device == "cuda": net = torch.nn.DataParallel(net)``: kuangliu/pytorch-cifar and its
many copies). With one device, ``DataParallel`` scatters each batch to it and calls the module
itself (no replicas, no gather); the scatter is CUDA's own kernel (``torch._C._scatter``), and
a batch still on the CPU is copied on a side stream. Here a scatter to one device is a copy to
it, with no side stream (the copy is recorded on the default stream, which waits for nothing):
what the module sees is what it sees on one GPU.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.parallel._functions as parallel_functions
import torch.nn.parallel.comm as comm

from tensor_dap.simulate.accelerator_api import DefaultStream

__all__ = ["install"]


def install() -> None:
    comm.scatter = _scatter(comm.scatter)
    comm.gather = _gather(comm.gather)
    parallel_functions._get_stream = _no_stream
    torch.Tensor.record_stream = _record_stream(torch.Tensor.record_stream)  # type: ignore[method-assign]


def _record_stream(original: Callable[..., Any]) -> Callable[..., Any]:
    def record_stream(self: torch.Tensor, stream: Any) -> None:
        if not isinstance(stream, DefaultStream):
            original(self, stream)

    record_stream.__doc__ = original.__doc__
    return record_stream


def _scatter(original: Callable[..., Any]) -> Callable[..., Any]:
    def scatter(
        tensor: torch.Tensor,
        devices: Any = None,
        chunk_sizes: Any = None,
        dim: int = 0,
        streams: Any = None,
        *,
        out: Any = None,
    ) -> Any:
        if devices is not None and len(devices) == 1 and out is None:
            index = torch._utils._get_device_index(devices[0], True)
            return (tensor.to(torch.device("cuda", index)),)
        return original(tensor, devices, chunk_sizes, dim, streams, out=out)

    scatter.__doc__ = original.__doc__
    return scatter


def _gather(original: Callable[..., Any]) -> Callable[..., Any]:
    """A gather of one device's tensor (the gradient of a scattered input flows back to where
    the input was): a copy to ``destination``."""

    def gather(tensors: Any, dim: int = 0, destination: Any = None, *, out: Any = None) -> Any:
        if len(tensors) == 1 and out is None:
            if destination in (-1, "cpu"):
                return tensors[0].to("cpu")
            index = torch._utils._get_device_index(destination, True) if destination else 0
            return tensors[0].to(torch.device("cuda", index))
        return original(tensors, dim, destination, out=out)

    gather.__doc__ = original.__doc__
    return gather


def _no_stream(device: Any) -> None:
    """The side stream a batch on the CPU is copied on: none (the copy is the CPU's)."""
    return None
