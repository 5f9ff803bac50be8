"""The program's own tensor subclasses on the simulated device.

A simulated CUDA tensor is a wrapper subclass whose C++ side is the stand-in device, and only
Python reads ``cuda:0`` of it. Two ways a program makes its own subclass from one would then
fail where a GPU run works:

- ``Tensor._make_wrapper_subclass(cls, size, ..., device=elem.device)`` (a logging tensor, a
  quantized-weight tensor wrapping the tensor it is given): the device Python reads is CUDA, and
  a wrapper made on CUDA aborts this CPU build's process at its first op. It is made on the
  stand-in device (its ``.device`` then reads ``accel:0``: the class is the program's own);
- ``x.as_subclass(Meters)`` (torchvision's ``tv_tensors``, units-carrying tensors): PyTorch
  refuses to give a second Python class to the C++ tensor a simulated tensor already is. The
  result is a view of ``x`` whose class is the program's class combined with the simulated
  tensor's (named as the program's: ``type(m).__name__`` is ``"Meters"``, ``isinstance(m,
  Meters)`` holds and ``m.device`` is ``cuda:0``). Unlike on a GPU, ``as_subclass`` of a leaf
  that requires grad gives a view of it, not the leaf itself. ``Tensor._make_subclass(Tagged,
  x, requires_grad)`` (a subclass's ``__new__``) gives a detached alias of ``x``, as PyTorch
  makes.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from tensor_dap.simulate.mode import is_cuda_device
from tensor_dap.simulate.tensor import SimulatedCudaTensor
from tensor_dap.testing.standin import accelerator_device

__all__ = ["install"]

#: the program's class -> its class on the simulated device, and back
_COMBINED: dict[type, type] = {}
_PROGRAMS: dict[type, type] = {}


class _DefaultTorchFunction(torch.Tensor):
    """Between the program's class and the simulated tensor's in a combined class: PyTorch's
    default ``__torch_function__`` (the program's ``super().__torch_function__(...)`` reaches
    it), which gives the program's class to each result, as on a GPU; the simulated tensor's
    own turns that off. (A function of its own, calling the default: PyTorch turns torch
    functions off for a class with a ``__torch_dispatch__`` whose ``__torch_function__`` is the
    default itself.)"""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return _DEFAULT(cls, func, types, args, kwargs)


_DEFAULT = torch.Tensor.__torch_function__.__func__  # type: ignore[attr-defined]


def install() -> None:
    tensor = torch.Tensor
    tensor._make_wrapper_subclass = staticmethod(  # type: ignore[method-assign]
        _on_the_standin(tensor._make_wrapper_subclass)
    )
    tensor.as_subclass = _as_subclass(tensor.as_subclass)  # type: ignore[method-assign]
    tensor._make_subclass = staticmethod(  # type: ignore[method-assign]
        _make_subclass(tensor._make_subclass)
    )


def _on_the_standin(make: Callable[..., Any]) -> Callable[..., Any]:
    def make_wrapper_subclass(cls: type, *args: Any, **kwargs: Any) -> Any:
        if is_cuda_device(kwargs.get("device")):
            kwargs["device"] = accelerator_device()
        # (or given in its place: size, strides, storage_offset, memory_format, dtype, layout,
        # device..., as torch's jagged nested tensor passes them)
        if len(args) > _DEVICE_AT and is_cuda_device(args[_DEVICE_AT]):
            args = (*args[:_DEVICE_AT], accelerator_device(), *args[_DEVICE_AT + 1 :])
        return make(cls, *args, **kwargs)

    return make_wrapper_subclass


#: where ``_make_wrapper_subclass`` takes its device among the arguments after ``cls``
_DEVICE_AT = 6


def _as_subclass(original: Callable[..., Any]) -> Callable[..., Any]:
    def as_subclass(self: torch.Tensor, cls: type) -> Any:
        if not isinstance(self, SimulatedCudaTensor):  # (a CPU result of a combined class's op)
            return original(self, _PROGRAMS.get(cls, cls))
        if not _needs_combining(self, cls):
            return original(self, cls)
        with torch._C.DisableTorchFunction():
            alias = self.view_as(self)
        return _recast(alias, cls)

    as_subclass.__doc__ = original.__doc__
    return as_subclass


def _make_subclass(original: Callable[..., Any]) -> Callable[..., Any]:
    # (taking anything: torch._dynamo's stand-in for this function is checked against its
    # signature, and a catch-all passes the check)
    def make_subclass(*args: Any, **kwargs: Any) -> Any:
        if len(args) < 2 or not _needs_combining(args[1], args[0]):
            return original(*args, **kwargs)
        cls, data, *rest = args
        require_grad = bool(rest[0] if rest else kwargs.get("require_grad", False))
        with torch._C.DisableTorchFunction():
            alias = data.detach()
        made = _recast(alias, cls)
        return made.requires_grad_(require_grad) if require_grad else made

    return make_subclass


def _needs_combining(tensor: Any, cls: type) -> bool:
    return isinstance(tensor, SimulatedCudaTensor) and not isinstance(tensor, cls)


def _recast(alias: torch.Tensor, cls: type) -> torch.Tensor:
    """``alias`` (a new simulated tensor) as an instance of ``cls`` on the simulated device."""
    cls = _PROGRAMS.get(cls, cls)
    kind = _COMBINED.get(cls)
    if kind is None:
        bases = (cls, _DefaultTorchFunction, type(alias))
        # (stated in the class itself: PyTorch turns torch functions off for a class with a
        # __torch_dispatch__ that does not)
        own = next(
            vars(k)["__torch_function__"] for k in cls.__mro__ if "__torch_function__" in vars(k)
        )
        if getattr(own, "__func__", own) is _DEFAULT:
            own = vars(_DefaultTorchFunction)["__torch_function__"]
        namespace = {"__module__": cls.__module__, "__torch_function__": own}
        kind = _COMBINED[cls] = type(cls.__name__, bases, namespace)
        _PROGRAMS[kind] = cls
    alias.__class__ = kind
    return alias
