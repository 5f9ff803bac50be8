"""What a name holds, described from metadata only, for the editor's hints and hovers.

A tensor by shape, dtype, device and grad state; an ``nn.Module`` by class, parameter count and
device(s) (``Sequential 161 params accel:0``); a list, tuple or dict of tensors by its length,
the distinct shapes of its items and their device(s) (``list[4] of ((16, 8), (16, 1))
accel:0``); anything else not at all (None), rather than by something misleading.

Never reads tensor data, never syncs a device, never calls the user's code: containers are
looked at only when they are exactly ``list``, ``tuple`` or ``dict`` (their ``len`` and
iteration are the interpreter's), a module through ``parameters()`` / ``buffers()``. The
result holds plain strings and ints, never the value.
"""

from __future__ import annotations

import itertools
import os
from types import CodeType
from typing import Any, Iterable, NamedTuple, Optional

import torch

from tensor_dap.agent.describe import tensor_fields
from tensor_dap.tensor_text import dtype_name, shape_text
from tensor_dap.tracedb import Observation

PEEK = 64
"""Items of a container looked at (its length is always exact)."""
MAX_SHAPES = 3
"""Distinct item shapes spelled out in a container's hint; more are written ``…``."""
MAX_DETAIL = 8
"""Items of a container listed one per line in the hover."""

_Tensor = torch.Tensor
_Module = torch.nn.Module
_CONTAINERS = (list, tuple, dict)


class Summary(NamedTuple):
    """A value as the trace store keeps it. For a tensor, ``text`` is None (the editor writes
    the shape, dtype and device); for a module or container, ``text`` is the hint and
    ``detail`` the lines the hover adds; ``dtype`` and ``device`` are then the distinct ones,
    joined by ``+``. (A named tuple: made on the sampled per-op path, it must be cheap.)"""

    shape: tuple[int, ...]
    dtype: str
    device: str
    requires_grad: bool
    grad_fn: Optional[str]
    text: Optional[str] = None
    detail: Optional[str] = None


def observation(
    summary: Summary,
    code: CodeType,
    line: int,
    name: str,
    hits: int,
    shape_varied: bool,
    process: str,
    col: Optional[int],
) -> Observation:
    """The trace-store row of ``summary``, bound to ``name`` at ``line`` of ``code``."""
    return Observation(
        path=os.path.abspath(code.co_filename),
        line=line,
        name=name,
        shape=summary.shape,
        dtype=summary.dtype,
        device=summary.device,
        requires_grad=summary.requires_grad,
        grad_fn=summary.grad_fn,
        summary=summary.text,
        detail=summary.detail,
        hits=hits,
        shape_varied=shape_varied,
        process=process,
        col=col,
    )


def is_described(value: Any) -> bool:
    """Whether :func:`describe` may describe ``value`` (cheap: its type only)."""
    return isinstance(value, (_Tensor, _Module)) or type(value) in _CONTAINERS


def describe(value: Any) -> Optional[Summary]:
    """The summary of ``value``, or None when it is not a tensor, a module or a container of
    tensors (or its metadata cannot be read)."""
    try:
        if isinstance(value, _Tensor):
            return describe_tensor(value)
        if isinstance(value, _Module):
            return _module(value)
        if type(value) in _CONTAINERS:
            return _container(value)
    except Exception:
        return None
    return None


def describe_tensor(tensor: Any) -> Summary:
    return Summary(*tensor_fields(tensor))


def count_text(count: int) -> str:
    """``161``, ``12,345``, ``1.2M``, ``7.0B``: exact below a million."""
    for size, suffix in ((10**9, "B"), (10**6, "M")):
        if count >= size:
            return f"{count / size:.1f}{suffix}"
    return f"{count:,}"


def _distinct(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _module(module: Any) -> Summary:
    params = list(module.parameters())
    buffers = list(module.buffers())
    count = sum(int(p.numel()) for p in params)
    trainable = sum(int(p.numel()) for p in params if p.requires_grad)
    devices = _distinct(str(t.device) for t in params + buffers)
    dtypes = _distinct(dtype_name(t.dtype) for t in params + buffers)
    name = type(module).__name__
    unit = "param" if count == 1 else "params"
    text = " ".join([name, count_text(count), unit, *(["+".join(devices)] if devices else [])])
    detail = [
        f"- {count:,} parameters in {len(params)} tensors, {trainable:,} trainable",
        f"- dtype: {', '.join(dtypes) or 'none'}; device: {', '.join(devices) or 'none'}",
    ]
    if buffers:
        detail.append(f"- {len(buffers)} buffers")
    return Summary(
        (), "+".join(dtypes), "+".join(devices), trainable > 0, None, text, "\n".join(detail)
    )


def _container(value: Any) -> Optional[Summary]:
    is_dict = type(value) is dict
    count = len(value)
    pairs = list(itertools.islice(value.items() if is_dict else enumerate(value), PEEK))
    if not pairs or not all(isinstance(item, _Tensor) for _, item in pairs):
        return None
    described = [(key, describe_tensor(item)) for key, item in pairs]
    summaries = [s for _, s in described]
    shapes = _distinct(shape_text(s.shape) for s in summaries)
    if len(shapes) == 1:
        shown = shapes[0]
    else:
        more = ", …" if len(shapes) > MAX_SHAPES else ""
        shown = f"({', '.join(shapes[:MAX_SHAPES])}{more})"
    devices = _distinct(s.device for s in summaries)
    dtypes = _distinct(s.dtype for s in summaries)
    text = f"{type(value).__name__}[{count}] of {shown} {'+'.join(devices)}"
    detail = []
    for key, summary in described[:MAX_DETAIL]:
        label = repr(key) if type(key) in (str, int) else "?"
        tracked = " grad" if summary.requires_grad or summary.grad_fn else ""
        detail.append(
            f"- [{label}]: `{shape_text(summary.shape)}` {summary.dtype} "
            f"on `{summary.device}`{tracked}"
        )
    if count > MAX_DETAIL:
        detail.append(f"- … {count - MAX_DETAIL} more")
    grad = any(s.requires_grad or s.grad_fn for s in summaries)
    return Summary((), "+".join(dtypes), "+".join(devices), grad, None, text, "\n".join(detail))
