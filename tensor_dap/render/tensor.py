"""A tensor from its metadata: the value line and the children of the Variables view.

Same format as :func:`tensor_dap.agent.describe.summary` (``tensor<(4, 1) float32 cpu grad
AddmmBackward0>``), plus a marker for what is unusual (``sparse_coo``, ``nested``, ``fake``).
Every read runs with ``__torch_function__`` disabled, subclasses' and modes' alike (a user's
subclass or the agent's ``TorchFunctionMode`` never sees it, and a frame of 1,000 tensors renders
in a third of the time) and is guarded: a broken attribute reads ``?``.
``.grad`` is read of leaves only (reading it of a non-leaf warns).
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import torch

from tensor_dap.agent.describe import dtype_name
from tensor_dap.render.base import Entry, Text, safe
from tensor_dap.render.stats import Statistics


def _dim_text(size: Any) -> str:
    try:
        return str(int(size))
    except Exception:
        return str(size)  # a symbolic size (j1, s0) stays as written


def shape_text(tensor: Any) -> str:
    """``(4, 1)``, ``(5,)``, ``()``; ``(3, j1)`` for symbolic sizes; ``?`` when unreadable."""
    try:
        if tensor.is_nested and not _is_jagged(tensor):
            return f"nested({_dim_text(tensor.size(0))})"
        dims = [_dim_text(s) for s in tensor.shape]
    except Exception:
        return "?"
    return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"


def _is_jagged(tensor: Any) -> bool:
    return safe(lambda: tensor.layout == torch.jagged, False)


def is_fake(tensor: Any) -> bool:
    module = sys.modules.get("torch._subclasses.fake_tensor")
    fake = getattr(module, "FakeTensor", None)
    return fake is not None and isinstance(tensor, fake)


def without_values(tensor: Any) -> Optional[str]:
    """Why ``tensor``'s values cannot be read as a dense array: ``"fake"``, ``"meta"``,
    ``"nested"``, ``"quantized"``, ``"empty"``, or its layout's name (``"sparse_coo"``...);
    None when they can. The statistics and View Tensor each say it in their own words."""
    if is_fake(tensor):
        return "fake"
    if safe(lambda: bool(tensor.is_meta), False):
        return "meta"
    if safe(lambda: bool(tensor.is_nested), False):
        return "nested"
    layout = safe(lambda: tensor.layout, None)
    if layout is not torch.strided:
        return str(layout).replace("torch.", "")
    if safe(lambda: bool(tensor.is_quantized), False):
        return "quantized"
    if safe(lambda: tensor.numel(), 0) == 0:
        return "empty"
    return None


def grad_fn_name(tensor: Any) -> Optional[str]:
    fn = safe(lambda: tensor.grad_fn, None)
    return type(fn).__name__ if fn is not None else None


def _markers(tensor: Any) -> list[str]:
    markers = []
    layout = safe(lambda: tensor.layout, torch.strided)
    if safe(lambda: bool(tensor.is_nested), False):
        markers.append("nested")
    elif layout is not torch.strided:
        markers.append(str(layout).replace("torch.", ""))
    if is_fake(tensor):
        markers.append("fake")
    return markers


def value_line(tensor: Any) -> str:
    """``tensor<(4, 1) float32 cpu grad AddmmBackward0>``: metadata only, never raises."""
    try:
        with torch._C.DisableTorchFunction():
            parts = [shape_text(tensor)]
            parts.append(safe(lambda: dtype_name(tensor.dtype), "?"))
            parts.append(safe(lambda: str(tensor.device), "?"))
            parts.extend(_markers(tensor))
            grad_fn = grad_fn_name(tensor)
            if grad_fn:
                parts.append(f"grad {grad_fn}")
            elif safe(lambda: bool(tensor.requires_grad), False):
                parts.append("grad")
        return f"tensor<{' '.join(parts)}>"
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
        Entry("shape", Text(shape_text(tensor)), ".shape"),
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
    markers = _markers(tensor)
    if markers:
        entries.append(Entry("layout", Text(" ".join(markers))))
    created = _created_at(tensor)
    if created:
        entries.append(Entry("created at", Text(created)))
    entries.append(Entry("statistics", Statistics(tensor)))
    return entries
