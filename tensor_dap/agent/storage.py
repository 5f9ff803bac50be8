"""Which memory a tensor's data lives in, for every tensor type: plain tensors, views, ``.data``
and ``detach()`` aliases, and wrapper subclasses whose own storage is a placeholder.

Rules ask this to tell whether two tensor objects write the same data (``p.grad`` and
``p.grad.data``; a tensor autograd saved and its ``detach()`` alias) without reading any data:
storage addresses are metadata kept on the host.
"""

from __future__ import annotations

from typing import Any, Hashable, Optional

import torch

_Tensor = torch.Tensor


def storage_key(tensor: Any, depth: int = 3) -> Optional[Hashable]:
    """The address of the storage behind ``tensor`` (the same for its views and aliases); for a
    wrapper subclass (its own storage a placeholder, address 0) the keys of the tensors it wraps
    — named by ``__tensor_flatten__`` (torch's protocol for traceable subclasses) where the
    subclass defines it, else found among its attributes and slots; ``None`` when nothing real
    is known."""
    try:
        address = tensor.untyped_storage().data_ptr()
        if address:
            return int(address)
    except Exception:  # sparse, nested and other layouts without one storage
        pass
    if depth == 0:
        return None
    inner = _wrapped(tensor)
    keys = tuple(storage_key(t, depth - 1) for t in inner)
    return keys if keys and None not in keys else None


def _wrapped(tensor: Any) -> list[Any]:
    flatten = getattr(type(tensor), "__tensor_flatten__", None)
    try:
        if flatten is not None:
            names = flatten(tensor)[0]
            return [getattr(tensor, name) for name in names]
        values = list(vars(tensor).values())
        for kind in type(tensor).__mro__:  # wrappers that keep their data in __slots__
            if kind is _Tensor:
                break
            slots = getattr(kind, "__slots__", ())
            for name in (slots,) if isinstance(slots, str) else slots:
                values.append(getattr(tensor, name, None))
        return [value for value in values if isinstance(value, _Tensor)]
    except Exception:
        return []


def real_storages(tensor: Any, depth: int = 3) -> list[Any]:
    """The untyped storages holding ``tensor``'s data: its own, those of a sparse tensor's
    indices and values, or for a wrapper subclass (its own storage a placeholder) those of the
    tensors it wraps; none for a tensor without real memory (meta, fake, empty)."""
    try:
        storage = tensor.untyped_storage()
        if storage.data_ptr():
            return [storage]
    except Exception:
        pass
    if depth == 0:
        return []
    inner = _sparse_parts(tensor) if tensor.layout in _SPARSE_PARTS else _wrapped(tensor)
    return [s for part in inner for s in real_storages(part, depth - 1)]


#: layout -> the methods giving the dense tensors a sparse tensor keeps its data in
_SPARSE_PARTS = {
    torch.sparse_coo: ("_indices", "_values"),
    torch.sparse_csr: ("crow_indices", "col_indices", "values"),
    torch.sparse_bsr: ("crow_indices", "col_indices", "values"),
    torch.sparse_csc: ("ccol_indices", "row_indices", "values"),
    torch.sparse_bsc: ("ccol_indices", "row_indices", "values"),
}


def _sparse_parts(tensor: Any) -> list[Any]:
    try:
        return [getattr(tensor, name)() for name in _SPARSE_PARTS[tensor.layout]]
    except Exception:  # a subclass or a layout that will not say
        return []
