"""The simulated CUDA tensor: a stand-in accelerator tensor that reports ``cuda:0``.

Its data and every op stay on the CPU (:class:`~tensor_dap.testing.standin.AcceleratorTensor`);
only what Python code reads of it says CUDA: ``.device`` is ``cuda:0`` and ``.is_cuda`` is
True, so programs that branch on them take their CUDA path and tensor-dap's findings name
``cuda:0``. (PyTorch's C++ side still knows it as the stand-in device.)
"""

from __future__ import annotations

import gc
import os
from typing import Any, Callable

import torch

from tensor_dap.simulate.stop import refuse
from tensor_dap.testing.standin import AcceleratorTensor, accelerator_device
from tensor_dap.testing.standin.tensor import present_as

__all__ = ["DEVICE", "SimulatedCudaTensor", "install", "live_bytes", "to_simulated"]

#: devices of this machine's processes (torchrun: one per local rank), and this process's
COUNT = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
#: what every simulated tensor of this process says it is on: ``cuda:LOCAL_RANK``
DEVICE = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0") or 0) % COUNT)


def _refusing_cuda_only(dispatch: Callable[..., Any]) -> Callable[..., Any]:
    """``dispatch`` (a ``__torch_dispatch__``), stopping the run with one line on an op that
    has a CUDA kernel only (a custom CUDA/Triton kernel, a cuDNN-only op)."""

    def torch_dispatch(cls: type, func: Any, *rest: Any) -> Any:
        try:
            return dispatch(cls, func, *rest)
        except NotImplementedError as error:
            if "with arguments from the 'CPU' backend" not in str(error):
                raise
            refuse(str(func.name()), "it has a CUDA kernel only")()

    return torch_dispatch


class SimulatedCudaTensor(AcceleratorTensor):
    """A tensor "on" ``cuda:0`` whose data is a CPU tensor."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return DEVICE

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    # each aten op: the stand-in's, and a CUDA-only op stops the run (see _refusing_cuda_only)
    __torch_dispatch__ = classmethod(
        _refusing_cuda_only(AcceleratorTensor.__torch_dispatch__.__func__)  # type: ignore[attr-defined]
    )


def install() -> None:
    """Set up the stand-in backend and make its op results simulated CUDA tensors."""
    accelerator_device()
    present_as(SimulatedCudaTensor, str(DEVICE), "cuda")


def to_simulated(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` moved to the simulated device (as ``.to("cuda")`` would)."""
    if isinstance(tensor, AcceleratorTensor):
        return tensor
    return tensor.to(accelerator_device())


def live_bytes() -> int:
    """Bytes held by the live simulated tensors (each storage once): the simulation's
    ``torch.cuda.memory_allocated``. Counted when asked, so ops pay nothing for it."""
    seen: set[int] = set()
    total = 0
    for obj in gc.get_objects():
        # (the type, not isinstance: that would ask lazy module proxies for __class__)
        if issubclass(type(obj), AcceleratorTensor):
            storage = obj._elem.untyped_storage()
            key = storage.data_ptr()
            if key not in seen:
                seen.add(key)
                total += storage.nbytes()
    return total
