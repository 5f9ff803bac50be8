"""Which memory a tensor's data lives in, for every tensor type: plain tensors, views, ``.data``
aliases, and wrapper subclasses whose own storage is a placeholder (their data pointer is 0).

Rules ask this to tell whether two tensor objects write the same data (``p.grad`` and
``p.grad.data``), without reading any data: pointers are metadata kept on the host.
"""

from __future__ import annotations

from typing import Any

import torch

_Tensor = torch.Tensor


def data_pointers(tensor: Any, depth: int = 2) -> frozenset[int]:
    """The data pointers behind ``tensor``: its own, or (a wrapper subclass, pointer 0) those
    of the tensors it wraps — named by ``__tensor_flatten__`` where the subclass defines it,
    else found among its attributes. Empty when nothing can be told."""
    try:
        pointer = int(tensor.data_ptr())
    except Exception:  # sparse, nested and other layouts without one data pointer
        pointer = 0
    if pointer:
        return frozenset((pointer,))
    if depth == 0:
        return frozenset()
    found: set[int] = set()
    for inner in _wrapped(tensor):
        found |= data_pointers(inner, depth - 1)
    return frozenset(found)


def _wrapped(tensor: Any) -> list[Any]:
    flatten = getattr(tensor, "__tensor_flatten__", None)
    try:
        if flatten is not None:
            names, _ = flatten()
            return [getattr(tensor, name) for name in names]
        return [value for value in vars(tensor).values() if isinstance(value, _Tensor)]
    except Exception:
        return []
