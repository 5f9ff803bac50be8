"""What kind of storage a tensor has: dense, or one whose values cannot be read as an array.

The value line marks the unusual kinds (``sparse_coo``, ``nested``, ``fake``); the statistics
and View Tensor say why they compute or draw nothing. All three ask here, and this module asks
nothing of them. Every read is guarded: a broken attribute counts as the common case.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import torch

from tensor_dap.render.base import safe


def is_fake(tensor: Any) -> bool:
    """Whether ``tensor`` is a ``FakeTensor`` (checked without importing the fake-tensor module)."""
    module = sys.modules.get("torch._subclasses.fake_tensor")
    fake = getattr(module, "FakeTensor", None)
    return fake is not None and isinstance(tensor, fake)


def is_jagged(tensor: Any) -> bool:
    return safe(lambda: tensor.layout == torch.jagged, False)


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


def markers(tensor: Any) -> list[str]:
    """``["nested"]``, ``["sparse_coo"]``, ``["fake"]``...: what the value line adds after the
    device; empty for an ordinary dense tensor."""
    found = []
    layout = safe(lambda: tensor.layout, torch.strided)
    if safe(lambda: bool(tensor.is_nested), False):
        found.append("nested")
    elif layout is not torch.strided:
        found.append(str(layout).replace("torch.", ""))
    if is_fake(tensor):
        found.append("fake")
    return found
