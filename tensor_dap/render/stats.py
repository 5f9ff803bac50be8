"""Statistics of a tensor, computed only when the user expands them.

Bounded: a tensor over ``FULL_LIMIT`` elements is measured on a strided sample of at most
``SAMPLE_LIMIT`` elements (views, no copy of the tensor), and the result says so. Computed under
``torch.no_grad()`` with ``__torch_function__`` disabled (no graph, no hooks, no rule fires),
with ``amin``/``amax`` (no index tensors), reading every number back in one transfer.
:class:`Statistics` holds the tensor by weak reference only.
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Optional

import torch

from tensor_dap.render.base import Entry, Text
from tensor_dap.render.layout import without_values

FULL_LIMIT = 10_000_000
SAMPLE_LIMIT = 1_000_000


class Statistics:
    """The "statistics" child: its value line promises, expanding it computes."""

    __slots__ = ("__weakref__", "_ref")

    def __init__(self, tensor: Any) -> None:
        self._ref: Any
        try:
            self._ref = weakref.ref(tensor)
        except TypeError:
            self._ref = lambda: None

    @property
    def tensor(self) -> Any:
        return self._ref()

    def value_line(self) -> str:
        return "expand to compute (min/max/mean/std, NaN/Inf)"

    def children(self) -> list[Entry]:
        tensor = self._ref()
        if tensor is None:
            return [Entry("unavailable", Text("the tensor no longer exists"))]
        return [Entry(name, Text(text)) for name, text in compute_statistics(tensor).items()]


_NO_DATA = {
    "fake": "fake tensor: no data",
    "meta": "meta tensor: no data",
    "nested": "nested tensor: not computed",
    "quantized": "quantized tensor: not computed",
    "empty": "empty",
}


def _no_data(tensor: Any) -> Optional[str]:
    """Why ``tensor`` has no values to measure, or ``None``."""
    kind = without_values(tensor)
    if kind is None:
        return None
    return _NO_DATA.get(kind, f"{kind} layout: not computed")


def sample(tensor: torch.Tensor, limit: int = SAMPLE_LIMIT) -> torch.Tensor:
    """A strided view of at most ``limit`` elements (the tensor itself when small enough)."""
    view = tensor.view(-1) if tensor.is_contiguous() else tensor
    while view.numel() > limit:
        dim = max(range(view.dim()), key=view.size)
        size = view.size(dim)
        step = min(size, math.ceil(view.numel() / limit))
        if step <= 1:
            break
        index = [slice(None)] * view.dim()
        index[dim] = slice(None, None, step)
        view = view[tuple(index)]
    return view


def _fmt(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def compute_statistics(tensor: Any) -> dict[str, str]:
    """min/max/mean/std and NaN/Inf counts as display text; a marker when they cannot be."""
    try:
        with torch.no_grad(), torch._C.DisableTorchFunction():
            reason = _no_data(tensor)
            return {"note": reason} if reason else _compute(tensor)
    except Exception as error:
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}


def _floating(tensor: torch.Tensor) -> bool:
    return tensor.is_floating_point()


def _compute(tensor: torch.Tensor) -> dict[str, str]:
    numel = tensor.numel()
    values = tensor
    if numel > FULL_LIMIT or (numel > SAMPLE_LIMIT and not _floating(tensor)):
        values = sample(tensor)  # ints/complex are copied (float64, abs): bound it
    out: dict[str, str] = {}
    if values.dtype is torch.bool:
        true = int(values.sum().item())
        out["true"] = f"{true:,} of {values.numel():,}"
    else:
        label = ""
        if values.is_complex():
            values, label = values.abs(), "|x| "
        floating = values.is_floating_point()
        nums = values if floating else values.double()
        parts = [values.amin().double(), values.amax().double(), nums.mean().double()]
        parts.append(nums.std().double() if values.numel() > 1 else parts[0] * 0)
        if floating:
            parts += [torch.isnan(values).sum().double(), torch.isinf(values).sum().double()]
        read = torch.stack([p.reshape(()) for p in parts]).tolist()  # the one device sync
        out[label + "min"], out[label + "max"] = _fmt(read[0]), _fmt(read[1])
        out[label + "mean"] = _fmt(read[2])
        out[label + "std"] = _fmt(read[3]) if values.numel() > 1 else "n/a (one element)"
        if floating:
            out["NaN"], out["Inf"] = f"{int(read[4]):,}", f"{int(read[5]):,}"
    if values.numel() < numel:
        out["sampled"] = f"{values.numel():,} of {numel:,} elements (strided)"
    return out
