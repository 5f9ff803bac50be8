"""What an autograd graph node saved for backward, as Python sees it.

Each node type exposes the tensors it saved as ``_saved_<name>`` attributes (sizes and strides
too, as ``_saved_<name>_sym_sizes``); ``inplace-saved`` looks for the tensor a write would
invalidate among them, ``nan-inf`` checks they were finite. The names are read once per node
type: ``dir()`` of a node costs tens of microseconds.
"""

from __future__ import annotations

from typing import Any

_SAVED_ATTRS: dict[type, tuple[str, ...]] = {}


def saved_attribute_names(node: Any) -> tuple[str, ...]:
    """The ``_saved_*`` attributes of ``node``'s type that may hold tensors."""
    kind = type(node)
    names = _SAVED_ATTRS.get(kind)
    if names is None:
        names = tuple(
            n
            for n in dir(node)
            if n.startswith("_saved_") and not n.endswith(("_sym_sizes", "_sym_strides"))
        )
        _SAVED_ATTRS[kind] = names
    return names
