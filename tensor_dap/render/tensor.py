"""A tensor from its metadata: the value line and the children of the Variables view.

The same summary as everywhere the tool shows a tensor (:func:`tensor_dap.tensor_text.summary_text`:
``tensor<(4, 1) float32 cpu grad AddmmBackward0>``), plus a marker for what is unusual
(``sparse_coo``, ``nested``, ``fake``); the line tracer shows tensors with :func:`value_line` too.
Every read runs with ``__torch_function__`` disabled, subclasses' and modes' alike (a user's
subclass or the agent's ``TorchFunctionMode`` never sees it, and a frame of 1,000 tensors renders
in a third of the time) and is guarded: a broken attribute reads ``?``.
``.grad`` is read of leaves only (reading it of a non-leaf warns).
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import torch

from tensor_dap.render.base import Entry, Text, safe
from tensor_dap.render.layout import is_jagged, markers
from tensor_dap.render.stats import Statistics
from tensor_dap.tensor_text import dim_text, dtype_name, grad_fn_name, shape_text, summary_text


def _shape_of(tensor: Any) -> str:
    """``tensor``'s shape as :func:`tensor_dap.tensor_text.shape_text` writes it (``(3, j1)``
    for symbolic sizes), ``nested(N)`` for a nested tensor's N components, ``?`` when
    unreadable."""
    try:
        if tensor.is_nested and not is_jagged(tensor):
            return f"nested({dim_text(tensor.size(0))})"
        return shape_text(tensor.shape)
    except Exception:
        return "?"


def value_line(tensor: Any) -> str:
    """``tensor<(4, 1) float32 cpu grad AddmmBackward0>``: metadata only, never raises."""
    try:
        with torch._C.DisableTorchFunction():
            return summary_text(
                _shape_of(tensor),
                safe(lambda: dtype_name(tensor.dtype), "?"),
                safe(lambda: str(tensor.device), "?"),
                grad_fn_name(tensor),
                safe(lambda: bool(tensor.requires_grad), False),
                markers(tensor),
            )
    except Exception:
        return "tensor<?>"


def _created_at(tensor: Any) -> Optional[str]:
    hook = getattr(sys.modules.get("tensor_dap.render"), "provenance_hook", None)
    if hook is None:
        return None
    where = safe(lambda: hook(tensor), None)
    return str(where) if where else None


def children(tensor: Any) -> list[Entry]:
    """shape, dtype, device, requires_grad, grad_fn, is_leaf, grad, created at, statistics."""
    try:
        with torch._C.DisableTorchFunction():
            return _children(tensor)
    except Exception as error:  # pragma: no cover - every read below is guarded already
        return [Entry("error", Text(f"<cannot render: {type(error).__name__}>"))]


def _children(tensor: Any) -> list[Entry]:
    is_leaf = safe(lambda: bool(tensor.is_leaf), None)
    entries = [
        Entry("shape", Text(_shape_of(tensor)), ".shape"),
        Entry("dtype", Text(safe(lambda: dtype_name(tensor.dtype), "?")), ".dtype"),
        Entry("device", Text(safe(lambda: str(tensor.device), "?")), ".device"),
        Entry(
            "requires_grad",
            Text(safe(lambda: str(bool(tensor.requires_grad)), "?")),
            ".requires_grad",
        ),
        Entry("grad_fn", Text(grad_fn_name(tensor) or "None"), ".grad_fn"),
        Entry("is_leaf", Text("?" if is_leaf is None else str(is_leaf)), ".is_leaf"),
    ]
    if is_leaf:
        grad = safe(lambda: tensor.grad, None)
        entries.append(Entry("grad", grad if grad is not None else Text("None"), ".grad"))
    else:
        entries.append(Entry("grad", Text("not kept (non-leaf tensor)")))
    unusual = markers(tensor)
    if unusual:
        entries.append(Entry("layout", Text(" ".join(unusual))))
    created = _created_at(tensor)
    if created:
        entries.append(Entry("created at", Text(created)))
    entries.append(Entry("statistics", Statistics(tensor)))
    return entries
