"""Which memory the live autograd graphs saved for backward, kept up to date as they grow.

``inplace-saved`` asks, before each in-place op of user code, whether a node of the live
graphs saved a tensor that the write would invalidate. Walking every graph for each write costs
the size of the graphs: a program that writes to a fresh tensor at each step (an environment's
observation buffer) while a graph grows over the steps (an episode's loss) pays for the whole
graph at every step, quadratic in the episode's length (20× the run time of an actor-critic
program). A tensor that shares a saved tensor's version counter shares its memory too (itself,
a view of one base, a saved output, a ``detach()`` alias), so an index of the storages the
graphs saved answers "no saved tensor can be this one" for most writes; only when the target's
memory is in it does the rule walk the graphs to find the node and check the counter.

The index grows with the graphs: a node is read once (marked as read in its own ``metadata``,
which lives as long as the node; a sequence number would not do, being counted per thread),
and the walk stops at nodes read before (what a node points to was read with it). A saved
storage is named by a weak reference to it (the ``int`` torch's ``StorageWeakRef`` holds: the
address of the storage's record, which stays allocated, and so unique, while the reference
lives; not its memory): the memory of graphs freed since is never taken for the target's; a
wrapper subclass's (the simulated device's tensors) by the storages of the tensors it wraps,
which its views and saved copies share (without them every write walked: 3× the run time of
an RL program under ``--simulate cuda``). A
tensor whose storage is replaced (``t.data = ...``, ``torch.utils.swap_tensors``:
:func:`storages_moved`) makes every index start over. Missed: a saved tensor given another
storage by ``set_`` (torch hands no mode that call) and then written to, and storages that
share memory without sharing the record (two ``torch.from_numpy`` of one array); walking every
graph at each write found those. The index starts over, letting go of its references, past
:data:`LIMIT` storages and when the watch ends.
"""

from __future__ import annotations

import collections
from typing import Any

import torch

from tensor_dap.agent.graph_nodes import saved_tensors
from tensor_dap.agent.storage import real_storages

#: storages remembered before the index starts over
LIMIT = 20_000
#: the key of the mark a read node carries in its ``metadata``
_READ = "tensor_dap.saved_index"
#: bumped when a tensor's storage is replaced: every index starts over
_epoch = 0
#: new nodes read in one update at most (past it the index cannot answer: the rule walks)
_MAX_NEW = 5000


def storages_moved() -> None:
    """A tensor's storage was replaced: what the indexes read of saved tensors may be stale."""
    global _epoch
    _epoch += 1


class SavedIndex:
    """The storages the live graphs' nodes saved (see the module's docstring)."""

    def __init__(self) -> None:
        #: the mark this index puts on the nodes it read (a new one when it starts over)
        self._mark = object()
        self._epoch = _epoch
        #: weak references to the saved storages (their records' addresses)
        self._storages: set[int] = set()
        #: a saved tensor without a storage of its own was seen (a wrapper subclass, sparse):
        #: the index cannot rule out
        self._unkeyed = False

    def __del__(self) -> None:
        self._let_go()

    def may_have_saved(self, target: Any, roots: list[Any]) -> bool:
        """False when no node reachable from ``roots`` saved a tensor sharing ``target``'s
        storage; True when one may have (or the index cannot tell)."""
        keys = _records(target)
        if not keys or not self._update(roots):
            return True
        return self._unkeyed or any(key in self._storages for key in keys)

    def _let_go(self) -> None:
        storages, self._storages = self._storages, set()
        self._mark = object()
        self._epoch = _epoch
        self._unkeyed = False
        try:
            for reference in storages:
                _free(reference)
        except Exception:  # at interpreter exit torch may be gone first: the process frees all
            pass

    def _update(self, roots: list[Any]) -> bool:
        """Read the nodes not read yet; False when there were too many to read."""
        if len(self._storages) > LIMIT or self._epoch != _epoch:
            self._let_go()
        mark, storages = self._mark, self._storages
        queue = collections.deque(roots)
        new = 0
        while queue:
            node = queue.popleft()
            if node is None:
                continue
            try:
                metadata = node.metadata
            except Exception:  # a node without metadata: read each time
                metadata = None
            if metadata is not None and metadata.get(_READ) is mark:
                continue
            new += 1
            if new > _MAX_NEW:  # what was read of this walk leads to nodes not read: forget
                self._let_go()
                return False
            for saved in saved_tensors(node):
                self._add(saved, storages)
            if metadata is not None:
                metadata[_READ] = mark
            queue.extend(next_node for next_node, _ in node.next_functions)
        return True

    def _add(self, saved: Any, storages: set[int]) -> None:
        held = real_storages(saved)
        if not held:
            # (an empty storage: a target sharing it is empty too, and is looked for by walking)
            self._unkeyed = self._unkeyed or not _empty(saved)
            return
        for storage in held:
            reference = storage._weak_ref()
            if reference in storages:  # a second reference to a record already held
                _free(reference)
            else:
                storages.add(reference)


def _free(reference: int) -> None:
    """Let go of a storage's weak reference (torch's read at the call: a stub torch that the
    line tracer's tests import may lack it)."""
    free: Any = torch.UntypedStorage._free_weak_ref
    free(reference)


def _empty(tensor: Any) -> bool:
    try:
        return bool(tensor.layout == torch.strided and tensor.untyped_storage().nbytes() == 0)
    except Exception:
        return False


def _records(tensor: Any) -> list[int]:
    """The addresses of the records of the storages holding ``tensor``'s data: the same for its
    views, aliases and saved copies; for a wrapper subclass (the simulated device's tensors),
    those of the tensors it wraps, whose views and saved copies share them too; none for a
    tensor without real memory (then the rule walks)."""
    return [int(storage._cdata) for storage in real_storages(tensor)]
