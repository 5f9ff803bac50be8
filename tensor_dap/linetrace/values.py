"""How the trace shows a value, and how it tells cheaply whether a variable changed.

Formatting must never break the traced program: every ``repr`` is guarded (``REPR FAILED``)
and bounded. Tensors are shown from metadata only (:func:`tensor_dap.agent.describe.summary`),
so a line costs no device sync unless NaN/Inf flags were asked for.

Change detection runs on every traced line, so it avoids ``repr`` and even the tensor summary
when it can: a variable still bound to the same object (and, for tensors, with the same in-place
version counter) is unchanged; only otherwise is the display text computed and compared.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from tensor_dap.agent.describe import summary

MAX_REPR = 100
_Tensor = torch.Tensor
_CONTAINERS = (list, dict, set, bytearray)


def safe_repr(value: Any, limit: int = MAX_REPR) -> str:
    """``repr(value)`` on one line, at most ``limit`` characters; never raises."""
    try:
        text = repr(value)
    except Exception:
        return "REPR FAILED"
    if not isinstance(text, str):
        return "REPR FAILED"
    text = text.replace("\n", " ")
    if len(text) > limit:
        keep = (limit - 3) // 2
        text = f"{text[:keep]}...{text[-keep:]}"
    return text


def nan_flags(tensor: Any) -> str:
    """`` nan`` / `` inf`` flags of a floating tensor (reads its data: opt-in only)."""
    try:
        if not (tensor.is_floating_point() or tensor.is_complex()) or tensor.numel() == 0:
            return ""
        with torch.no_grad():
            flags = ""
            if bool(torch.isnan(tensor).any()):
                flags += " nan"
            if bool(torch.isinf(tensor).any()):
                flags += " inf"
            return flags
    except Exception:
        return ""


def show(value: Any, nan: bool = False) -> str:
    """The text shown after ``name =``: a tensor summary or a bounded safe repr."""
    if isinstance(value, _Tensor):
        try:
            text = summary(value)
        except Exception:
            return "tensor<REPR FAILED>"
        if nan:
            flags = nan_flags(value)
            if flags:
                text = f"{text[:-1]}{flags}>"
        return text
    return safe_repr(value)


def extra_key(value: Any) -> Any:
    """What changes when an object is mutated in a way the trace shows, or None.

    Tensors: the version counter (bumped by in-place ops) and the grad flag; containers: the
    length. Anything else is compared by identity alone (a new object is shown, an object
    mutated in place is not).
    """
    if isinstance(value, _Tensor):
        try:
            return (value._version, value.requires_grad)
        except Exception:
            return None
    if isinstance(value, _CONTAINERS):
        try:
            return len(value)
        except Exception:
            return None
    return None


def tensor_meta(tensor: Any) -> Any:
    """What a tensor summary is made of, as a cheap comparable tuple (no text built)."""
    try:
        fn = tensor.grad_fn
        return (tensor.shape, tensor.dtype, tensor.device, tensor.requires_grad, type(fn))
    except Exception:
        return None


def hidden(name: str, value: Any) -> bool:
    """Names the trace leaves out: dunders and imported modules."""
    return name.startswith("__") or isinstance(value, types.ModuleType)
