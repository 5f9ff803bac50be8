"""Where each tensor was created: file, line, op — weak, bounded, cheap.

The registry maps each tensor to a :class:`Prov` in a
:class:`~tensor_dap.agent.tensor_map.TensorMap`:
it keeps nothing alive, steps aside for ``torch.utils.swap_tensors``, and is capped: past
``capacity`` entries the oldest tenth is dropped, so memory is bounded whatever the program does.

A ``Prov`` of a tensor without gradient history also remembers how it came to lack one — the op
that cut the history (``detach``, ``.data``, ``torch.tensor(t)``, an op under ``no_grad``) — and
the provenance of the tensors it was computed from, a few levels deep, and — however deep —
the nearest cut upstream (``cut_at``). That is what lets ``grad-lost`` say where the graph was
cut, whatever the depth of the model or the length of the computation after the cut.
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Callable, Optional

from tensor_dap.agent.tensor_map import TensorMap
from tensor_dap.findings import Origin

#: key in ``grad_fn.metadata`` holding the Prov of the op that created that graph node
NODE_PROV_KEY = "tensor_dap"

#: one order for what the watch sees: Provs made, and the rules' events
CLOCK = itertools.count()

#: how many generations of parents a Prov keeps (bounds chains built by loops)
MAX_DEPTH = 6
#: past it, how many generations of its inputs a Prov keeps (as copies: :meth:`Prov.shallow`),
#: and of how many inputs each
SHALLOW_GENERATIONS = 2
SHALLOW_FAN_IN = 2


class Prov:
    """Creation record of one tensor."""

    __slots__ = (
        "path",
        "line",
        "op",
        "cut",
        "parents",
        "depth",
        "cut_at",
        "cut_site",
        "untracked",
        "made",
        "upstream",
        "unrecorded",
        "shortened",
        "detached_from",
    )

    def __init__(
        self,
        path: str,
        line: int,
        op: str,
        cut: Optional[str] = None,
        parents: tuple[Prov, ...] = (),
        depth: int = 0,
        cut_at: Optional[Prov] = None,
        cut_site: Optional[tuple[str, int]] = None,
        untracked: bool = False,
        upstream: Optional[frozenset[int]] = None,
    ) -> None:
        self.path = path
        self.line = line
        self.op = op
        #: how the gradient history was cut at this op, e.g. "detach()" or "an op under no_grad"
        self.cut = cut
        #: provenance of the inputs, for tensors without gradient history only
        self.parents = parents
        self.depth = depth
        #: the nearest Prov upstream (this one included) where gradient history was cut, kept
        #: however many generations of parents are dropped
        self.cut_at = self if cut else cut_at
        #: (path, line) of the ``with torch.no_grad():`` or ``@torch.no_grad()`` behind the cut
        self.cut_site = cut_site
        #: an input tensor had no Prov (made by a run the engine did not sample, or before the
        #: watch): the history cannot be followed past this op
        self.untracked = untracked
        #: ``id()`` and data address of those inputs, while the op ran: a rule asking whether
        #: this tensor was made of a tensor alive now (``cm.sum(1)`` of ``cm``) compares them
        self.unrecorded: tuple[tuple[int, int], ...] = ()
        #: when it was made, in the order of :data:`CLOCK` (a rule compares it with its own
        #: events: ``grad-lost`` asks whether a tensor was made after a hand-out to NumPy)
        self.made = next(CLOCK)
        #: of a cut: ``id()`` of the parameters whose gradient flowed through the tensor it cut
        #: (:func:`~tensor_dap.agent.graph_walk.upstream_leaves`); None when not known
        self.upstream = upstream
        #: a copy kept past :data:`MAX_DEPTH` whose parents were dropped (:meth:`shallow`): its
        #: history goes on where this record no longer says
        self.shortened = False
        #: of a ``detach()``: the record of the tensor it was called on, when there is one (a
        #: message says where that was made: ``loss.detach().cpu()`` is the loss's line's)
        self.detached_from: Optional[Prov] = None

    def shallow(self, generations: int) -> Prov:
        """A copy that keeps ``generations`` of its parents (the first :data:`SHALLOW_FAN_IN`
        of each), copied so too: what a Prov past :data:`MAX_DEPTH` keeps of its inputs, so
        that the op just before it is still known (``x.sum(1)`` of ``x``). A copy is made when
        its original was (``made``): compare records by that, not by identity."""
        kept = self.parents[:SHALLOW_FAN_IN] if generations > 0 else ()
        parents = tuple(p.shallow(generations - 1) for p in kept)
        copy = Prov(
            self.path,
            self.line,
            self.op,
            self.cut,
            parents,
            1 + max((p.depth for p in parents), default=-1),
            self.cut_at,
            self.cut_site,
            self.untracked,
            self.upstream,
        )
        copy.made = self.made
        copy.unrecorded = self.unrecorded
        copy.shortened = self.shortened or len(kept) < len(self.parents)
        copy.detached_from = self.detached_from
        return copy

    def origin(self) -> Origin:
        return Origin(path=self.path, line=self.line, op=self.op)

    def where(self) -> str:
        return f"{os.path.basename(self.path)}:{self.line}"

    def __repr__(self) -> str:
        return f"Prov({self.where()} by {self.op}, cut={self.cut!r})"


class ProvenanceRegistry(TensorMap[Prov]):
    """``id(tensor)`` -> Prov, weak and bounded (see :class:`TensorMap`)."""

    def __init__(self, capacity: int = 200_000) -> None:
        super().__init__(capacity)
        self._numbers: dict[int, tuple[float, Prov]] = {}
        self._arrays: dict[int, Prov] = {}

    def record(self, tensor: Any, prov: Prov) -> None:
        self.set(tensor, prov)

    def lookup(self, tensor: Any) -> Optional[Prov]:
        found: Optional[Prov] = self.get(tensor)
        return found

    #: how many numbers read by ``.item()`` are remembered (the newest; each kept alive)
    NUMBERS = 4096

    def record_number(self, number: float, prov: Prov) -> None:
        """A float read from a tensor with gradient history. Floats cannot be weakly referenced:
        the newest few thousand are kept alive (a few dozen bytes each) to check identity."""
        numbers = self._numbers
        numbers[id(number)] = (number, prov)
        if len(numbers) > self.NUMBERS:
            del numbers[next(iter(numbers))]

    def clear(self) -> None:
        super().clear()
        self._numbers.clear()
        self._arrays.clear()

    def lookup_number(self, number: float) -> Optional[Prov]:
        entry = self._numbers.get(id(number))
        return entry[1] if entry is not None and entry[0] is number else None

    #: how many memory addresses handed to NumPy by ``.numpy()`` are remembered (the newest)
    ARRAYS = 256

    def record_array(self, address: int, prov: Prov) -> None:
        """The memory of a tensor handed to NumPy by ``.numpy()``: a tensor made on it again
        (``torch.from_numpy``, ``torch.as_tensor``) is the same data, with the same history.
        Only the address is kept (nothing alive); an address reused after a free can name a
        stale Prov, which only ever reads as "this came from .numpy()"."""
        arrays = self._arrays
        arrays.pop(address, None)
        arrays[address] = prov
        if len(arrays) > self.ARRAYS:
            del arrays[next(iter(arrays))]

    def lookup_array(self, address: int) -> Optional[Prov]:
        return self._arrays.get(address) if self._arrays else None


def address_of(tensor: Any) -> int:
    """The address of ``tensor``'s memory (what ``record_array`` keys by); 0 for a tensor
    without plain memory (sparse, nested, a wrapper subclass)."""
    try:
        return int(tensor.data_ptr())
    except Exception:
        return 0


def first_cut(prov: Optional[Prov], limit: int = 64) -> Optional[Prov]:
    """The nearest Prov (breadth first through parents) at which gradient history was cut."""
    if prov is not None and prov.cut_at is not None:
        return prov.cut_at
    return _nearest(prov, lambda p: bool(p.cut), limit)


def made_through(prov: Prov, since: Prov, ops: frozenset[str], limit: int = 64) -> bool:
    """Whether a record between ``prov`` and its ancestor ``since`` (depth first through
    parents, ``since`` and what made it left out) is of one of ``ops``: whether a gradient
    became a penalty through a norm, or a step through ``sign()``."""
    queue, seen = [prov], 0
    while queue and seen < limit:
        record = queue.pop()
        seen += 1
        if record is since:
            continue
        if record.op in ops:
            return True
        queue.extend(record.parents)
    return False


def untracked_input(prov: Optional[Prov], limit: int = 64) -> Optional[Prov]:
    """The nearest Prov upstream whose inputs could not all be followed, if one."""
    return _nearest(prov, lambda p: p.untracked, limit)


def _nearest(prov: Optional[Prov], wanted: Callable[[Prov], bool], limit: int) -> Optional[Prov]:
    """The first Prov, breadth first from ``prov`` through parents, that is ``wanted``."""
    queue = [prov] if prov is not None else []
    seen = 0
    while queue and seen < limit:
        current = queue.pop(0)
        seen += 1
        if wanted(current):
            return current
        queue.extend(current.parents)
    return None


#: ops that make a tensor of Python or NumPy data (``torch.tensor(loss.item())``)
REWRAPS = frozenset({"tensor", "as_tensor", "asarray", "from_numpy", "frombuffer"})


def rewrapped(prov: Optional[Prov], limit: int = 8) -> bool:
    """Whether ``prov`` runs back (``limit`` roots at most) to a tensor made of Python or NumPy
    data: values read out of a graph may have been made a tensor again there."""
    return any(root.op in REWRAPS for root in roots(prov, limit=limit))


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
            if all(current.made != f.made for f in found):  # (copies: Prov.shallow)
                found.append(current)
        else:
            stack.extend(reversed(current.parents))
    return found
