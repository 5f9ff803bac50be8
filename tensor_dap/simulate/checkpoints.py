"""``torch.save`` and ``torch.load`` across the simulated device, as on a GPU.

A checkpoint written on a GPU says, per storage, the device it came from (``cuda:0``), and
``torch.load`` without a ``map_location`` puts each tensor back there: an embedding table
saved from the GPU and loaded again is on the GPU. Here the simulated tensors are written as
the host tensors they hold, tagged with their simulated device, and loading such a file puts
the tensors of a checkpoint (a state dict, nested dicts, lists, tuples) back on the simulated
device; with ``map_location="cpu"`` they stay on the CPU, as on a GPU. (As with a real GPU's
checkpoint, a file saved here loads on a machine without CUDA only with a ``map_location``.)
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch
from torch import serialization

from tensor_dap.simulate import tensor as simulated
from tensor_dap.simulate.mode import is_cuda_device

__all__ = ["install", "map_tensors"]

#: ahead of the CPU's tagger (10) and CUDA's deserializer (20)
_PRIORITY = 9
#: per thread: while a save runs, host storage address -> the simulated device it stands for;
#: while a load runs, the addresses of the storages tagged with a CUDA device
_saving = threading.local()
_loading = threading.local()


def install() -> None:
    serialization.register_package(_PRIORITY, _location_tag, _restore_on_host)
    torch.load = _load(torch.load)
    torch.save = _save(torch.save)


def _location_tag(storage: Any) -> Any:
    """The simulated device of a host storage a save wrote for a simulated tensor."""
    locations = getattr(_saving, "locations", None)
    if not locations or storage.device.type != "cpu":
        return None
    return locations.get(storage.data_ptr())


def _restore_on_host(storage: Any, location: str) -> Any:
    """A storage tagged with a CUDA device stays in host memory, remembered: the tensors made
    of it go to the simulated device when the load returns."""
    if not location.startswith("cuda"):
        return None
    loaded = getattr(_loading, "storages", None)
    if loaded is not None:
        loaded.add(storage.data_ptr())
    return storage


def _load(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.load``: ``map_location`` naming CUDA loads onto the simulated device; none
    puts what was saved from it back there."""

    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        if is_cuda_device(map_location):
            return map_tensors(original(f, "cpu", *args, **kwargs), simulated.to_simulated)
        if map_location is not None:
            return original(f, map_location, *args, **kwargs)
        outer = getattr(_loading, "storages", None)
        tagged: set[int] = set()
        _loading.storages = tagged
        try:
            loaded = original(f, None, *args, **kwargs)
        finally:
            _loading.storages = outer
        if not tagged:
            return loaded

        def back(tensor: torch.Tensor) -> torch.Tensor:
            if tensor.device.type == "cpu" and tensor.untyped_storage().data_ptr() in tagged:
                return _keep_kind(tensor, simulated.to_simulated(tensor.detach()))
            return tensor

        return map_tensors(loaded, back)

    load.__doc__ = original.__doc__
    return load


def _save(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.save``: simulated tensors are written as the host tensors they hold, tagged
    with their device."""

    def save(obj: Any, *args: Any, **kwargs: Any) -> Any:
        outer = getattr(_saving, "locations", None)
        _saving.locations = locations = dict(outer or {})

        def to_host(tensor: torch.Tensor) -> torch.Tensor:
            if not isinstance(tensor, simulated.SimulatedCudaTensor):
                return tensor
            host = tensor.detach().cpu()
            if host.untyped_storage().nbytes():  # (an empty storage has no address to tell)
                locations[host.untyped_storage().data_ptr()] = str(tensor.device)
            return _keep_kind(tensor, host)

        try:
            return original(map_tensors(obj, to_host), *args, **kwargs)
        finally:
            _saving.locations = outer

    save.__doc__ = original.__doc__
    return save


def _keep_kind(original: torch.Tensor, moved: torch.Tensor) -> torch.Tensor:
    """``moved`` (detached) as a Parameter when ``original`` was one, a leaf requiring grad
    when it did."""
    if isinstance(original, torch.nn.Parameter) or getattr(original, "_is_param", False):
        return torch.nn.Parameter(moved, requires_grad=original.requires_grad)
    return moved.requires_grad_() if original.requires_grad and moved.is_leaf else moved


def map_tensors(value: Any, convert: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``convert`` applied to every tensor in nested dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        return convert(value)
    if isinstance(value, dict):
        mapped = type(value)() if type(value) is not dict else {}
        for key, item in value.items():
            mapped[key] = map_tensors(item, convert)
        if hasattr(value, "_metadata"):  # a state_dict's version info
            mapped._metadata = value._metadata  # type: ignore[attr-defined]
        return mapped
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(map_tensors(item, convert) for item in value)
    return value
