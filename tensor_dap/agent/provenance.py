"""Where each tensor was created: file, line, op — weak, bounded, cheap.

The registry maps ``id(tensor)`` to a weak reference and a :class:`Prov`. A weak reference keeps
nothing alive; an entry whose tensor died (or whose id was reused) fails the identity check and is
ignored. The table is capped: past ``capacity`` entries the oldest tenth is dropped, so memory is
bounded whatever the program does.

A ``Prov`` of a tensor without gradient history also remembers how it came to lack one — the op
that cut the history (``detach``, ``.data``, ``torch.tensor(t)``, an op under ``no_grad``) — and
the provenance of the tensors it was computed from, a few levels deep. That is what lets
``grad-lost`` say where the graph was cut.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Optional

from tensor_dap.agent.findings import Origin

#: key in ``grad_fn.metadata`` holding the Prov of the op that created that graph node
NODE_PROV_KEY = "tensor_dap"

#: how many generations of parents a Prov keeps (bounds chains built by loops)
MAX_DEPTH = 6


class Prov:
    """Creation record of one tensor."""

    __slots__ = ("path", "line", "op", "cut", "parents", "depth")

    def __init__(
        self,
        path: str,
        line: int,
        op: str,
        cut: Optional[str] = None,
        parents: tuple[Prov, ...] = (),
        depth: int = 0,
    ) -> None:
        self.path = path
        self.line = line
        self.op = op
        #: how the gradient history was cut at this op, e.g. "detach()" or "an op under no_grad"
        self.cut = cut
        #: provenance of the inputs, for tensors without gradient history only
        self.parents = parents
        self.depth = depth

    def origin(self) -> Origin:
        return Origin(path=self.path, line=self.line, op=self.op)

    def where(self) -> str:
        return f"{os.path.basename(self.path)}:{self.line}"

    def __repr__(self) -> str:
        return f"Prov({self.where()} by {self.op}, cut={self.cut!r})"


class ProvenanceRegistry:
    """``id(tensor)`` -> (weak reference, Prov), bounded."""

    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self._table: dict[int, tuple[weakref.ref[Any], Prov]] = {}

    def __len__(self) -> int:
        return len(self._table)

    def record(self, tensor: Any, prov: Prov) -> None:
        table = self._table
        try:
            table[id(tensor)] = (weakref.ref(tensor), prov)
        except TypeError:  # not weak-referenceable
            return
        if len(table) > self.capacity:
            self._evict()

    def lookup(self, tensor: Any) -> Optional[Prov]:
        entry = self._table.get(id(tensor))
        if entry is None or entry[0]() is not tensor:
            return None
        return entry[1]

    def clear(self) -> None:
        self._table.clear()

    def _evict(self) -> None:
        """Drop dead entries; if still too full, the oldest tenth."""
        table = self._table
        dead = [key for key, (ref, _) in table.items() if ref() is None]
        for key in dead:
            del table[key]
        excess = len(table) - int(self.capacity * 0.9)
        if excess > 0:
            for key in list(table)[:excess]:
                del table[key]


def first_cut(prov: Optional[Prov], limit: int = 64) -> Optional[Prov]:
    """The nearest Prov (breadth first through parents) at which gradient history was cut."""
    queue = [prov] if prov is not None else []
    seen = 0
    while queue and seen < limit:
        current = queue.pop(0)
        seen += 1
        if current.cut:
            return current
        queue.extend(current.parents)
    return None


def roots(prov: Optional[Prov], limit: int = 8) -> list[Prov]:
    """The earliest recorded Provs this one was computed from (or itself, without parents)."""
    if prov is None:
        return []
    found: list[Prov] = []
    stack = [prov]
    visited = 0
    while stack and len(found) < limit and visited < 256:
        current = stack.pop()
        visited += 1
        if not current.parents:
            if all(current is not f for f in found):
                found.append(current)
        else:
            stack.extend(reversed(current.parents))
    return found
