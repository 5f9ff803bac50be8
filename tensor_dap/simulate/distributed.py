"""``torch.distributed`` under the simulation: each rank a simulated device, talking over gloo.

NCCL needs GPUs, so a process group asked for with NCCL is made with gloo. gloo takes CPU
tensors only: the collectives called from Python hand it the CPU data of simulated tensors
(their results land in that data, which the simulated tensors share).
``DistributedDataParallel``, whose reducer calls the process group from C++, is replaced for
simulated modules by :mod:`tensor_dap.simulate.ddp`.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from tensor_dap.testing.standin import AcceleratorTensor

__all__ = ["install"]

#: collectives whose tensor arguments gloo gets as the CPU data
_COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "all_to_all_single",
    "gather",
    "scatter",
    "send",
    "recv",
    "isend",
    "irecv",
)


def _host(value: Any) -> Any:
    if isinstance(value, AcceleratorTensor):
        return value._elem
    if isinstance(value, list) and any(isinstance(v, AcceleratorTensor) for v in value):
        return [_host(v) for v in value]
    return value


def _on_host(original: Callable[..., Any]) -> Callable[..., Any]:
    def collective(*args: Any, **kwargs: Any) -> Any:
        args = tuple(_host(a) for a in args)
        kwargs = {key: _host(value) for key, value in kwargs.items()}
        return original(*args, **kwargs)

    collective.__name__ = getattr(original, "__name__", "collective")
    collective.__doc__ = original.__doc__
    return collective


def _init_process_group(original: Callable[..., Any]) -> Callable[..., Any]:
    """``init_process_group``: NCCL needs GPUs; the simulated ranks talk over gloo."""

    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        if backend is not None and "nccl" in str(backend):
            backend = "gloo"
        return original(backend, *args, **kwargs)

    init_process_group.__doc__ = original.__doc__
    return init_process_group


def install() -> None:
    """Patch ``torch.distributed`` (when built)."""
    if not torch.distributed.is_available():
        return
    distributed = torch.distributed
    distributed.init_process_group = _init_process_group(distributed.init_process_group)
    for name in _COLLECTIVES:
        original = getattr(distributed, name, None)
        if original is not None:
            setattr(distributed, name, _on_host(original))
    from tensor_dap.simulate import ddp

    ddp.install()
