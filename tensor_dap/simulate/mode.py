"""The simulation's ``TorchFunctionMode``: ``"cuda"`` devices in the program's torch calls
mean the simulated device.

It sits *below* the watch's mode (pushed first, see :func:`tensor_dap.simulate.start`): the
watch sees the user's own call (``torch.zeros(3, device="cuda")``), then this mode hands the
call on with the stand-in device in place of CUDA's. Every op passes through it, so it only
looks at ``device=`` keywords and the few functions that take a device positionally.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from tensor_dap.agent import native
from tensor_dap.agent.replaced_methods import REPLACED
from tensor_dap.agent.threads import NewThreads
from tensor_dap.simulate.autocast import autocast_arguments
from tensor_dap.simulate.tensor import COUNT
from tensor_dap.testing.standin import accelerator_device
from tensor_dap.testing.standin.tensor import BACKEND_NAME

__all__ = ["SimulationMode", "check_index", "install", "is_cuda_device", "to_standin"]

_Tensor = torch.Tensor
# (the mode is pushed before the program runs, so these are PyTorch's own functions)
_TO = _Tensor.to
_CUDA = _Tensor.cuda
#: ``F.ctc_loss`` (which the mode sees, not the ``torch.ctc_loss`` it calls) and that
_CTC_LOSSES = (torch.nn.functional.ctc_loss, torch.ctc_loss)


def is_cuda_device(value: Any) -> bool:
    """Whether ``value`` names a CUDA device (``"cuda"``, ``"cuda:0"``, ``torch.device``)."""
    if isinstance(value, torch.device):
        return value.type == "cuda"
    return isinstance(value, str) and (value == "cuda" or value.startswith("cuda:"))


def to_standin(value: Any) -> Any:
    """``value`` with a CUDA device replaced by the stand-in that simulates it."""
    if not is_cuda_device(value):
        return value
    check_index(torch.device(value).index)
    return accelerator_device()


def check_index(index: Any) -> None:
    """Refuse a device index past the simulated devices, as CUDA does."""
    if index is not None and not 0 <= index < COUNT:
        raise RuntimeError(
            f"CUDA error: invalid device ordinal (tensor-dap --simulate cuda: {COUNT} device(s))"
        )


class SimulationMode(TorchFunctionMode):
    """Reads CUDA devices as the simulated one; everything else passes untouched."""

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        if kwargs:
            device = kwargs.get("device")
            if device is not None and is_cuda_device(device):
                kwargs = dict(kwargs, device=to_standin(device))
            if kwargs.get("pin_memory"):  # factories: pinned host memory is plain here
                kwargs = dict(kwargs, pin_memory=False)
        else:
            kwargs = {}
        func = REPLACED.get(func, func)  # (see tensor_dap.agent.replaced_methods)
        if func is _TO:
            args = tuple(to_standin(a) for a in args)
        elif func is _CUDA:
            device = args[1] if len(args) > 1 else kwargs.pop("device", None)
            if isinstance(device, int):
                device = f"cuda:{device}"
            kwargs.pop("memory_format", None)
            return _TO(args[0], to_standin(device or "cuda"), **kwargs)
        elif func in _CTC_LOSSES:
            args, kwargs = _ctc_lengths_read(args, kwargs)
        try:
            return func(*autocast_arguments(func, args, kwargs), **kwargs)
        except RuntimeError as error:
            cuda_words(error)
            raise


#: how PyTorch's C++ names the stand-in in its errors, and what CUDA's say there
_STANDIN_TYPE = re.compile(rf"\b{BACKEND_NAME}(\w+)Type\b")
_STANDIN_DEVICE = re.compile(rf"\b{BACKEND_NAME}:(\d+)")


def cuda_words(error: BaseException) -> None:
    """An op's error as CUDA words it: ``[torch.cuda.FloatTensor [16, 32]] is at version 2``,
    not the stand-in's ``accelFloatType`` (autograd's in-place check, dtype errors)."""
    if not isinstance(error, RuntimeError) or not error.args or not isinstance(error.args[0], str):
        return
    text = error.args[0]
    worded = _STANDIN_DEVICE.sub(r"cuda:\1", _STANDIN_TYPE.sub(r"torch.cuda.\1Tensor", text))
    if worded != text:
        error.args = (worded, *error.args[1:])


def _ctc_lengths_read(args: tuple[Any, ...], kwargs: Any) -> tuple[tuple[Any, ...], Any]:
    """CTC's lengths on the CPU read as CUDA reads them: as lists of ints (the stand-in, a
    tensor subclass, would take PyTorch's path for subclasses instead, which divides the
    losses by the CPU target lengths and raises)."""
    log_probs = args[0] if args else kwargs.get("log_probs")
    if not isinstance(log_probs, _Tensor) or log_probs.device.type == "cpu":
        return args, kwargs

    def read(value: Any) -> Any:
        on_host = isinstance(value, _Tensor) and value.device.type == "cpu" and value.dim() == 1
        return value.tolist() if on_host else value

    args = tuple(read(a) if i in (2, 3) else a for i, a in enumerate(args))
    named = {k: read(v) for k, v in kwargs.items() if k in ("input_lengths", "target_lengths")}
    return args, (dict(kwargs, **named) if named else kwargs)


def _pass_through_in_c() -> None:
    """Where the C path is built, the mode's ``__torch_function__`` is C for the ops it hands on
    untouched (``_fastpath.PassThrough``); the Python method above takes the rest (``.to``,
    ``.cuda``, CTC, a ``device=`` or ``pin_memory=`` keyword, anything under autocast). Without
    it a warning PyTorch's C++ raises names this file's line, not the program's, and the
    "once per location" filter shows each such warning once for the whole program."""
    fastpath = native.fastpath
    if fastpath is None or isinstance(
        SimulationMode.__dict__["__torch_function__"], fastpath.PassThrough
    ):
        return
    busy = functools.partial(torch.is_autocast_enabled, "cuda")
    special = frozenset((_TO, _CUDA, *_CTC_LOSSES))
    slow = SimulationMode.__torch_function__
    SimulationMode.__torch_function__ = fastpath.PassThrough(  # type: ignore[method-assign]
        slow, special, ("device", "pin_memory"), busy, cuda_words, REPLACED
    )


def install() -> None:
    """Push the mode in the calling thread, and in each thread the program starts, for the
    rest of the process."""
    _pass_through_in_c()
    SimulationMode().__enter__()  # type: ignore[no-untyped-call]
    NewThreads(_enter_thread)


def _enter_thread() -> None:
    """A thread the program started: the mode goes *under* any mode already pushed there (the
    watch's, which follows new threads too and may have come first), as in the main thread."""
    above = []
    while torch._C._len_torch_function_stack() > 0:
        above.append(torch._C._pop_torch_function_stack())
    SimulationMode().__enter__()  # type: ignore[no-untyped-call]
    for pushed in reversed(above):
        torch._C._push_on_torch_function_stack(pushed)
