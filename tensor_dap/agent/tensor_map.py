"""``id(tensor) -> value`` tables that keep nothing alive and never stand in the program's way.

The engine remembers things about the program's tensors (where each was made, a gradient's
version at the last step, the parameters a forward used) without keeping them alive: an entry
holds a weak reference, and one whose tensor died (its id reused) fails the identity check.

But ``torch.utils.swap_tensors`` refuses a tensor that has any weak reference — and ``nn.Module``
swaps its parameters on ``.to()`` / ``.float()`` whenever
``torch.__future__.set_swap_module_params_on_conversion(True)`` is on (PyTorch's default for
some tensor subclasses). So every table here is registered, and :func:`guard_swaps` wraps
``swap_tensors``: the tables let go of both tensors for the swap and take them back after it,
each with the other's entry, since the two objects swapped their contents.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable, Generic, Optional, TypeVar

import torch

from tensor_dap.agent import saved_index

V = TypeVar("V")

_MISSING: Any = object()

#: every live table (weakly: a table dies with its watch)
_TABLES: weakref.WeakSet[TensorMap[Any]] = weakref.WeakSet()


#: entries a table may hold before its first sweep of dead ones
_FIRST_SWEEP = 64


class TensorMap(Generic[V]):
    """``id(tensor)`` -> (weak reference, value), bounded by ``capacity`` when one is given
    (past it, dead entries go, then the oldest tenth).

    Entries of tensors that died are swept out once the table holds twice what was alive at
    the last sweep: a table written at each step (a sampled op's result, each step's new
    gradients) stays within twice its live entries, at a cost that is constant per entry
    written, rather than growing with the program's steps up to ``capacity`` (and the garbage
    collector walking every dead entry meanwhile)."""

    def __init__(self, capacity: Optional[int] = None) -> None:
        self.capacity = capacity
        self._table: dict[int, tuple[weakref.ref[Any], V]] = {}
        self._sweep_at = _FIRST_SWEEP
        _TABLES.add(self)

    def __len__(self) -> int:
        return len(self._table)

    def set(self, tensor: Any, value: V) -> None:
        table = self._table
        try:
            table[id(tensor)] = (weakref.ref(tensor), value)
        except TypeError:  # not weak-referenceable
            return
        size = len(table)
        if size > self._sweep_at or (self.capacity is not None and size > self.capacity):
            self._sweep()
            if self.capacity is not None and len(table) > self.capacity:
                self._evict()

    def get(self, tensor: Any, default: Any = None) -> Any:
        entry = self._table.get(id(tensor))
        if entry is None or entry[0]() is not tensor:
            return default
        return entry[1]

    def pop(self, tensor: Any, default: Any = None) -> Any:
        key = id(tensor)
        entry = self._table.get(key)
        if entry is None or entry[0]() is not tensor:
            return default
        del self._table[key]
        return entry[1]

    def items(self) -> list[tuple[Any, V]]:
        """The live entries as ``(tensor, value)`` (dead ones are dropped)."""
        live = []
        for key, (ref, value) in list(self._table.items()):
            tensor = ref()
            if tensor is None:
                del self._table[key]
            else:
                live.append((tensor, value))
        return live

    def clear(self) -> None:
        self._table.clear()

    def _sweep(self) -> None:
        table = self._table
        for key in [key for key, (ref, _) in table.items() if ref() is None]:
            del table[key]
        self._sweep_at = max(_FIRST_SWEEP, 2 * len(table))

    def _evict(self) -> None:
        """Past ``capacity`` with only live entries: the oldest tenth goes."""
        table = self._table
        assert self.capacity is not None
        excess = len(table) - int(self.capacity * 0.9)
        for key in list(table)[: max(excess, 0)]:
            del table[key]


def _swap_guarded(original: Callable[[Any, Any], Any], t1: Any, t2: Any) -> Any:
    held = [(table, table.pop(t1, _MISSING), table.pop(t2, _MISSING)) for table in list(_TABLES)]
    swapped = False
    try:
        result = original(t1, t2)
        swapped = True
        saved_index.storages_moved()  # each tensor now has the other's storage
        return result
    finally:
        for table, first, second in held:
            if swapped:  # each object now holds what the other held
                first, second = second, first
            if first is not _MISSING:
                table.set(t1, first)
            if second is not _MISSING:
                table.set(t2, second)


def guard_swaps() -> None:
    """Wrap ``torch.utils.swap_tensors`` (once; it stays: the wrapper only adds the step-aside)."""
    original = torch.utils.swap_tensors
    if getattr(original, "_tensor_dap_guard", False):
        return

    @functools.wraps(original)
    def swap_tensors(t1: Any, t2: Any) -> Any:
        return _swap_guarded(original, t1, t2)

    swap_tensors._tensor_dap_guard = True  # type: ignore[attr-defined]
    torch.utils.swap_tensors = swap_tensors
