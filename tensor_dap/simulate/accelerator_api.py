"""``torch.accelerator`` answered by the simulation: the device-generic face of ``torch.cuda``.

PyTorch's own tutorials pick their device with ``torch.accelerator.current_accelerator()``, and
torch itself asks it (``torch.utils.checkpoint``'s default device type). Unanswered, the
simulation's device would show through as the stand-in backend it is built on (``accel``: "Using
accel device", ``torch.amp.autocast("accel")`` refused) and ``torch.accelerator.synchronize()``
would fail where a GPU runs it. So it answers as a machine with one CUDA device does, from the
same answers as :mod:`~tensor_dap.simulate.cuda_api` (the current stream: the default one, never
capturing); setting a stream, graphs and allocator statistics stop the run with one line, as
there.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from tensor_dap.simulate import cuda_api
from tensor_dap.simulate import tensor as simulated
from tensor_dap.simulate.stop import refuse

__all__ = ["install"]


def _current_accelerator(check_available: bool = False) -> torch.device:
    return torch.device("cuda")


def _device_index(device: Any = None) -> int:
    """The simulated device's index for ``device`` (None: the current one); refuses others."""
    if device is None:
        return simulated.DEVICE.index
    index = device if isinstance(device, int) else torch.device(device).index
    cuda_api._set_device(device if isinstance(device, int) else torch.device(device))
    return simulated.DEVICE.index if index is None else index


class _DeviceIndex:
    """``with torch.accelerator.device_index(i):``: one device, nothing to switch."""

    def __init__(self, device: Optional[int], /) -> None:
        if device is not None:
            _device_index(device)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


class DefaultStream:
    """The device's default stream, the only one there is here: work on it is done when asked
    for (every op ran on the CPU already), and no CUDA graph ever captures it (optimizers'
    ``step()`` ask ``torch.accelerator.current_stream().is_capturing()`` on CUDA)."""

    device = simulated.DEVICE

    def is_capturing(self) -> bool:
        return False

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def wait_stream(self, stream: Any) -> None:
        """(``nn.DataParallel``'s scatter of a CPU batch: no side stream here to wait for)"""
        return None

    def __repr__(self) -> str:
        return f"<tensor-dap simulated default stream on {self.device}>"


_STREAM = DefaultStream()


def _current_stream(device: Any = None) -> DefaultStream:
    _device_index(device)
    return _STREAM


_ANSWERS: dict[str, Callable[..., Any]] = {
    "is_available": lambda: True,
    "current_accelerator": _current_accelerator,
    "device_count": lambda: simulated.COUNT,
    "current_device_index": lambda: simulated.DEVICE.index,
    "current_stream": _current_stream,
    "current_device_idx": lambda: simulated.DEVICE.index,
    "set_device_index": _device_index,
    "set_device_idx": _device_index,
    "synchronize": cuda_api._nothing,
    "empty_cache": cuda_api._nothing,
    "empty_host_cache": cuda_api._nothing,
    "memory_allocated": cuda_api._memory_allocated,
    "max_memory_allocated": cuda_api._max_memory_allocated,
    "memory_reserved": cuda_api._memory_allocated,
    "max_memory_reserved": cuda_api._max_memory_allocated,
    "reset_peak_memory_stats": cuda_api._reset_peak,
    "reset_accumulated_memory_stats": cuda_api._nothing,
}

#: names with no CPU meaning, as in torch.cuda
_UNSUPPORTED = (
    "set_stream",
    "Graph",
    "memory_stats",
    "get_memory_info",
)


def install() -> None:
    """Answer the ``torch.accelerator`` of this torch (the names it has) from the simulation."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:  # torch before 2.6
        return
    for name, answer in _ANSWERS.items():
        if hasattr(accelerator, name):
            setattr(accelerator, name, cuda_api._own(name, answer))
    if hasattr(accelerator, "device_index"):
        accelerator.device_index = _DeviceIndex
    why = "streams, graphs and allocator statistics"
    for name in _UNSUPPORTED:
        if hasattr(accelerator, name):
            setattr(accelerator, name, refuse(f"torch.accelerator.{name}", why))
