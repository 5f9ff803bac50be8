"""The legacy typed CUDA tensors, ``torch.cuda.FloatTensor`` and its kin, on the simulated
device.

Older GAN and RL code (eriklindernoren/PyTorch-GAN and its many copies) picks a tensor type
once, ``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor``, then makes tensors
with it (``Tensor(imgs.size(0), 1).fill_(1.0)``, ``Tensor(np.random.normal(...))``), converts
with ``x.type(Tensor)`` and asks ``isinstance(x, torch.cuda.FloatTensor)`` or ``x.type()``. A
CPU build has no such types; here each is the CPU type's constructor, moved to the simulated
device, and a simulated tensor of its dtype is an instance of it, as on a GPU.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from tensor_dap.simulate import tensor as simulated

__all__ = ["install"]

_NAMES = (
    "FloatTensor",
    "DoubleTensor",
    "HalfTensor",
    "BFloat16Tensor",
    "ByteTensor",
    "CharTensor",
    "ShortTensor",
    "IntTensor",
    "LongTensor",
    "BoolTensor",
)


class _LegacyCudaType(type):
    """``torch.cuda.FloatTensor``: called, a tensor of its dtype on the simulated device."""

    dtype: torch.dtype
    cpu_type: Callable[..., torch.Tensor]

    def __call__(cls, *args: Any, **kwargs: Any) -> torch.Tensor:
        return simulated.to_simulated(cls.cpu_type(*args, **kwargs))

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, simulated.SimulatedCudaTensor) and instance.dtype == cls.dtype

    def __repr__(cls) -> str:
        return f"<class 'torch.cuda.{cls.__name__}'>"


def _legacy_type(name: str) -> type:
    cpu_type = getattr(torch, name)
    namespace = {"dtype": cpu_type.dtype, "cpu_type": cpu_type, "is_cuda": True}
    kind = _LegacyCudaType(name, (), namespace)
    kind.__module__ = "torch.cuda"
    return kind


def _target(dtype: Any) -> Optional[torch.dtype]:
    """The dtype ``x.type(dtype)`` converts to on the simulated device, when ``dtype`` names a
    CUDA type (one of these classes, or ``"torch.cuda.FloatTensor"``); None otherwise."""
    if isinstance(dtype, _LegacyCudaType):
        return dtype.dtype
    if isinstance(dtype, str) and dtype.startswith("torch.cuda."):
        name = dtype.rpartition(".")[2]
        return getattr(torch, name).dtype if name in _NAMES else None
    return None


def _type(original: Callable[..., Any]) -> Callable[..., Any]:
    def type(  # noqa: A001 (Tensor.type's own name)
        self: torch.Tensor, dtype: Any = None, non_blocking: bool = False, **kwargs: Any
    ) -> Any:
        if dtype is None and not kwargs:
            name = original(self)
            if isinstance(self, simulated.SimulatedCudaTensor):
                return f"torch.cuda.{name.rpartition('.')[2]}"
            return name
        target = _target(dtype)
        if target is not None:
            return self.to(device=simulated.DEVICE, dtype=target, non_blocking=non_blocking)
        return original(self, dtype, non_blocking, **kwargs)

    type.__doc__ = original.__doc__
    return type


def _set_default_tensor_type(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.set_default_tensor_type(torch.cuda.FloatTensor)`` (older repos' way to make every
    tensor on the GPU): the dtype, and the simulated device as the default device."""

    def set_default_tensor_type(t: Any) -> None:
        target = _target(t)
        if target is None:
            return original(t)  # type: ignore[no-any-return]
        torch.set_default_dtype(target)
        torch.set_default_device("cuda")
        return None

    set_default_tensor_type.__doc__ = original.__doc__
    return set_default_tensor_type


def install() -> None:
    for name in _NAMES:
        if hasattr(torch, name):
            setattr(torch.cuda, name, _legacy_type(name))
    torch.Tensor.type = _type(torch.Tensor.type)  # type: ignore[method-assign]
    torch.set_default_tensor_type = _set_default_tensor_type(torch.set_default_tensor_type)
