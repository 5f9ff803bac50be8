"""Live tensor memory per device, its peak, and the user lines that made it (``check --memory``).

Every op's tensor results (one level deep) are looked at; each *storage* is counted once, when
first seen (a view, ``detach()`` or ``.data`` alias shares its base's storage; a wrapper
subclass counts the storages of the tensors it wraps), on ``str(tensor.device)``, under the
user line whose op made it. A storage is held through a weak reference to the storage itself
(the ``int`` torch's ``StorageWeakRef`` wraps), so a tensor autograd saved for backward still
counts after the Python tensor is gone, and nothing here keeps any memory alive.

The step run on each op is in C where the fast path is built (``_fastpath.books_after``, the
twin of ``_add`` and ``_insert`` for plain storages, and of ``sweep``): this is what makes the
books cheap enough to leave on (``benchmarks/overhead.py``).

Frees are not announced, so they are found by sweeping the table for expired storages. A sweep
runs when the live total would pass the peak: the peak is then the true live total, and the top
lines at it are the per-line totals of that moment (copied when the next sweep is about to take
memory away). To keep the cost per op bounded, a sweep that finds nothing freed doubles the
number of storages made before the next one (at most a quarter of the live ones), and one
that finds something brings it back to 1: while memory only grows, sweeps are rare; once it is
freed and reused, every new peak is swept. A peak reached between two spaced sweeps may include
storages freed since the last one.

Tensors made outside torch functions are counted where they can be found: the gradients
autograd's engine writes into ``.grad`` as each ``backward()`` returns (of the leaf tensors its
line's first graph accumulates into, found by a walk of that graph: :func:`before_backward`)
and again at each ``optimizer.step()`` with the optimizer's state (:func:`install`). Not seen:
buffers an op allocates and frees internally, intermediate results saved inside a composite op
such as ``cross_entropy``.
"""

from __future__ import annotations

import os
import threading
from types import FrameType, SimpleNamespace
from typing import Any, Optional

import torch

from tensor_dap.agent import frames, native, optimizers
from tensor_dap.agent.graph_nodes import accumulates_grad, graph_node
from tensor_dap.agent.storage import real_storages
from tensor_dap.agent.tensor_map import TensorMap

#: lines kept in a device's ``top``
TOP = 10

_Tensor = torch.Tensor
Site = tuple[str, int, str]


#: a storage's weak reference, as torch's ``StorageWeakRef`` holds it (without the object): the
#: ``int`` ``storage._weak_ref()`` gives is the storage's address, and while it is not freed
#: the storage's record (not its memory) stays allocated, so no new storage takes the address
_expired: Any = torch.UntypedStorage._expired
_free_weak_ref: Any = torch.UntypedStorage._free_weak_ref
#: ``str(device)`` of each device seen (``str`` costs a fifth of a microsecond per op)
_DEVICE_NAMES: dict[Any, str] = {}


class MemoryLedger:
    """What :mod:`tensor_dap.agent.memory` says: ``observe`` each op's result, ``summary``."""

    def __init__(self) -> None:
        #: storage address (a weak reference this ledger owns) -> (device, bytes, site)
        self._entries: dict[int, tuple[str, int, Site]] = {}
        #: device -> bytes of entries not swept yet (the live total after a sweep)
        self._live: dict[str, int] = {}
        self._peak: dict[str, int] = {}
        #: device -> site -> bytes live now
        self._by_site: dict[str, dict[Site, int]] = {}
        self._peak_sites: dict[str, dict[Site, tuple[int, int]]] = {}
        self._pending: set[str] = set()
        self._since_sweep = 0
        #: storages made between sweeps: doubled after a sweep that found nothing freed (a
        #: program building its model frees nothing), back to 1 when one finds something
        self._interval = 1
        #: bytes live on one device past which it is reported (the ``memory-limit`` rule)
        self.limit: Optional[int] = None
        #: devices over the limit and reported: again once a sweep finds them under it
        self._over: set[str] = set()
        #: (device, live bytes) of devices that went over the limit since the last ``crossed()``
        self._crossed: list[tuple[str, int]] = []
        #: per thread: the last ``backward()``'s line and the leaves of each line (below)
        self._threads = threading.local()

    @property
    def backward_line(self) -> Optional[tuple[str, int]]:
        """(path, line) of this thread's last ``backward()``: where its ``.grad`` tensors were
        made."""
        line: Optional[tuple[str, int]] = getattr(self._threads, "line", None)
        return line

    @backward_line.setter
    def backward_line(self, line: Optional[tuple[str, int]]) -> None:
        self._threads.line = line

    @property
    def grad_leaves(self) -> dict[tuple[str, int], TensorMap[None]]:
        """A ``backward()`` line of this thread -> the leaf tensors (parameters, weakly) its
        first graph accumulates gradients into: their ``.grad`` is counted as it returns. Per
        thread: a thread reading another's ``.grad`` while that one's backward (which runs
        without the GIL) writes it made PyTorch's storage objects race (SIGSEGV)."""
        leaves: Optional[dict[tuple[str, int], TensorMap[None]]] = getattr(
            self._threads, "leaves", None
        )
        if leaves is None:
            leaves = self._threads.leaves = {}
        return leaves

    def __del__(self) -> None:
        entries, self._entries = self._entries, {}
        try:
            for key in entries:
                _free_weak_ref(key)
        except Exception:  # at interpreter exit torch may be gone first: the process frees all
            pass

    def observe(self, out: Any, op: str, caller: Any) -> None:
        if isinstance(out, _Tensor):
            self._add(out, op, caller)
        elif isinstance(out, (tuple, list)):
            for item in out[:64]:
                if isinstance(item, _Tensor):
                    self._add(item, op, caller)

    def _add(self, tensor: Any, op: str, caller: Any) -> None:
        storages = None
        try:
            storage = tensor.untyped_storage()
            # an address this ledger holds a weak reference to is the same storage, alive
            # (the tensor holds it): a view or an in-place result costs one lookup
            if storage._cdata in self._entries:
                return
            if storage.data_ptr():
                storages = [storage]
        except Exception:
            pass
        if storages is None:  # sparse, nested, wrapper subclasses: the tensors they hold
            storages = [s for s in real_storages(tensor) if s._cdata not in self._entries]
            if not storages:
                return
        device = tensor.device
        name = _DEVICE_NAMES.get(device)
        if name is None:
            name = _DEVICE_NAMES[device] = str(device)
        site = _site(op, caller)
        for storage in storages:
            self._insert(storage._weak_ref(), name, int(storage.nbytes()), site)

    def _insert(self, key: int, device: str, nbytes: int, site: Site) -> None:
        self._since_sweep += 1
        live = self._live.get(device, 0) + nbytes
        peak = self._peak.get(device, 0)
        if live > peak and self._sweep_due():
            self.sweep()
            live = self._live.get(device, 0) + nbytes
        self._entries[key] = (device, nbytes, site)
        self._live[device] = live
        sites = self._by_site.get(device)
        if sites is None:
            sites = self._by_site[device] = {}
        sites[site] = sites.get(site, 0) + nbytes
        if live > peak:
            self._peak[device] = live
            self._pending.add(device)
        if self.limit is not None and live > self.limit and device not in self._over:
            self._check_limit(device)

    def _check_limit(self, device: str) -> None:
        """The device's unswept total passed the limit: sweep for the true one."""
        self.sweep()
        live = self._live[device]
        if self.limit is not None and live > self.limit:
            self._over.add(device)
            self._crossed.append((device, live))

    def crossed(self) -> list[tuple[str, int]]:
        """(device, live bytes) of each device whose live tensors passed :attr:`limit` since
        the last call; reported once until its memory falls under the limit again."""
        found, self._crossed = self._crossed, []
        return found

    def _sweep_due(self) -> bool:
        cap = max(1, len(self._entries) // 4)
        return self._since_sweep >= min(self._interval, cap)

    def sweep(self) -> None:
        """Drop the storages freed since the last sweep (the peak's lines copied first)."""
        self._since_sweep = 0
        expired = [key for key in self._entries if _expired(key)]
        self._interval = 1 if expired else self._interval * 2
        if not expired:
            return
        entries = self._entries
        for device in {entries[key][0] for key in expired} & self._pending:
            self._snapshot(device)
        live, by_site = self._live, self._by_site
        for key in expired:
            device, nbytes, site = entries.pop(key)
            _free_weak_ref(key)
            live[device] -= nbytes
            sites = by_site[device]
            left = sites[site] - nbytes
            if left:
                sites[site] = left
            else:
                del sites[site]
        if self._over and self.limit is not None:
            self._over = {d for d in self._over if self._live.get(d, 0) > self.limit}

    def _counts(self, device: str) -> dict[Site, int]:
        counts: dict[Site, int] = {}
        for entry_device, _, site in self._entries.values():
            if entry_device == device:
                counts[site] = counts.get(site, 0) + 1
        return counts

    def _snapshot(self, device: str) -> None:
        counts = self._counts(device)
        sites = self._by_site.get(device, {})
        self._peak_sites[device] = {s: (b, counts.get(s, 0)) for s, b in sites.items()}
        self._pending.discard(device)

    def live_bytes(self) -> dict[str, int]:
        """Device -> live tensor bytes now (after a sweep)."""
        self.sweep()
        return {device: n for device, n in self._live.items() if n}

    def site_of(self, storage: Any) -> Optional[Site]:
        """The (path, line, op) that made ``storage``, if these books saw it (the memory view)."""
        entry = self._entries.get(storage._cdata)
        return entry[2] if entry is not None else None

    def live_top(self, device: str) -> tuple[int, list[dict[str, Any]]]:
        """The live tensor bytes on ``device`` now and its top lines (as in :meth:`summary`)."""
        self.sweep()
        counts = self._counts(device)
        sites = self._by_site.get(device, {})
        top = ranked_rows({s: (b, counts.get(s, 0)) for s, b in sites.items()})
        return self._live.get(device, 0), top

    def summary(self) -> dict[str, Any]:
        """``{device: {"peak_bytes": N, "top": [{path, line, op, bytes, count}, ...]}}``."""
        for device in list(self._pending):
            self._snapshot(device)
        result: dict[str, Any] = {}
        for device, peak in sorted(self._peak.items()):
            top = ranked_rows(self._peak_sites.get(device, {}))
            result[device] = {"peak_bytes": peak, "top": top}
        return result


def ranked_rows(sites: dict[Site, tuple[int, int]]) -> list[dict[str, Any]]:
    """``[{path, line, op, bytes, count}]`` of the :data:`TOP` sites holding most bytes."""
    ranked = sorted(sites.items(), key=lambda item: (-item[1][0], item[0]))
    return [
        {"path": p, "line": line, "op": op, "bytes": nbytes, "count": count}
        for (p, line, op), (nbytes, count) in ranked[:TOP]
        if nbytes
    ]


#: code object's file -> its absolute path (``abspath`` costs microseconds per op)
_PATHS: dict[str, str] = {}


def _site(op: str, caller: Any) -> Site:
    """The user line of the op: from the frame ``caller``, or a ``(path, line)`` given."""
    line = caller if isinstance(caller, tuple) else _user_line(caller)
    return ("", 0, op) if line is None else (line[0], line[1], op)


def _user_line(caller: FrameType) -> Optional[tuple[str, int]]:
    """(absolute path, line) of the user's frame at or above ``caller``."""
    user = frames.user_frame(caller)
    if user is None:
        return None
    name = user.f_code.co_filename
    path = _PATHS.get(name)
    if path is None:
        path = _PATHS[name] = os.path.abspath(name)
    return (path, user.f_lineno)


#: the name the bookkeeping goes by in a watch's plans (no rule has it)
PLAN_ID = "memory"


def _after(op: Any, args: Any, kwargs: Any, out: Any, caller: FrameType, state: Any) -> None:
    """Planned like a rule's ``after`` on every op, so both engine paths run it."""
    if out is None:
        after_backward(op, args, kwargs, out, caller, state)
    else:
        state.memory.observe(out, op.name, caller)


def _applies(op: Any) -> bool:
    """Not planned on in-place ops (their result is a storage already counted: ``optimizer.step()``
    runs dozens); on ``backward()``, which returns nothing, for the gradients it wrote."""
    return not op.inplace


def applies_before(op: Any) -> bool:
    return bool(op.backward)


def applies_passthrough(op: Any) -> bool:
    """``copy.deepcopy(tensor)``: torch makes the copy's storage inside ``__deepcopy__`` (a
    metadata function, otherwise passed through), so its result is counted as an op's (an EMA
    model's ``copy.deepcopy(model)`` copies its parameters with ``clone``, which is one)."""
    return bool(op.name == "__deepcopy__")


#: nodes walked, at most, to find the leaves a ``backward()`` line's graph accumulates into
_LEAF_WALK_LIMIT = 20000


def before_backward(op: Any, args: Any, kwargs: Any, caller: FrameType, state: Any) -> None:
    """The user line of the last ``backward()``: the ``.grad`` tensors autograd's engine makes
    there (outside any torch function) are counted under it as it returns (the first time a
    line runs ``backward()``, its graph is walked for the leaves it writes ``.grad`` into)."""
    books = state.memory
    if books is None or not op.backward:  # (planned on __deepcopy__ too: its after is wanted)
        return
    line = books.backward_line = _user_line(caller)
    known = books.grad_leaves
    if line is not None and line not in known:  # (autograd.grad writes no .grad)
        known[line] = TensorMap() if op.name == "grad" else _graph_leaves(args, kwargs)


def after_backward(op: Any, args: Any, kwargs: Any, out: Any, caller: Any, state: Any) -> None:
    """``backward()`` returned: the ``.grad`` of its line's leaves to the books, under its line
    (``torch.autograd.grad`` writes no ``.grad``: nothing)."""
    books = state.memory
    if books is None or not op.backward or op.name == "grad":
        return
    line = books.backward_line
    leaves = books.grad_leaves.get(line) if line is not None else None
    if not leaves:
        return
    with torch._C.DisableTorchFunction():
        grads = [leaf.grad for leaf, _ in leaves.items()]
    _observe_all(grads, _GRAD, line, state)


def _graph_leaves(args: Any, kwargs: Any) -> TensorMap[None]:
    """The leaf tensors the graphs of ``backward()``'s tensors (``args[0]`` or ``tensors=``: one,
    or a sequence) accumulate gradients into (their ``AccumulateGrad`` nodes' variables), held
    weakly by a :class:`TensorMap` (which steps aside for ``torch.utils.swap_tensors``: a weak
    reference of its own on a parameter would make swapping it fail)."""
    roots = args[0] if args else (kwargs or {}).get("tensors")
    roots = roots if isinstance(roots, (list, tuple)) else [roots]
    queue: list[Any] = [graph_node(t) for t in roots if isinstance(t, _Tensor)]
    seen: set[Any] = set()  # the nodes themselves (see graph_walk.node_key)
    leaves: TensorMap[None] = TensorMap()
    with torch._C.DisableTorchFunction():
        while queue and len(seen) < _LEAF_WALK_LIMIT:
            node = queue.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            variable = getattr(node, "variable", None) if accumulates_grad(node) else None
            if isinstance(variable, _Tensor):  # (one without weak references is passed over)
                leaves.set(variable, None)
            queue.extend(next_node for next_node, _ in node.next_functions)
    return leaves


#: the op names the optimizer's tensors are counted under
_GRAD = SimpleNamespace(name="grad")
#: rule_state key: the optimizers' steps the books have seen (see :func:`install`)
_SEEN = "memory.steps-seen"


def install(state: Any) -> list[Any]:
    """Books for what an optimizer holds, made where no watched op sees it: the ``.grad`` of its
    parameters (counted under the line of the ``backward()`` that made them) and its state
    (``exp_avg``, momentum buffers...: under the line calling ``step()``; looked at again when
    the number of parameters with state changes: the state is updated in place).

    The gradients are looked at after the first 8 steps of each optimizer, then after one in 16:
    those the ``backward()`` lines' graphs accumulate into are counted as each returns
    (:func:`after_backward`), so what a step finds is only what the program set by hand, and a
    look at every parameter each step is what a large model's step would pay most."""
    #: the frame that called the step running now (one at a time: a step that raised leaves
    #: it here until the next step, which replaces it)
    callers: dict[int, Any] = {}
    #: optimizer -> [its steps seen, how many parameters had state when last looked at]
    #: (weakly: nothing kept, and an optimizer made anew each iteration leaves no entry; kept
    #: by the watch: a watch started again goes on counting, it does not look at every
    #: gradient again for 8 steps; a list updated in place: a step writes no entry)
    seen: TensorMap[list[int]] = state.rule_state.setdefault(_SEEN, TensorMap())

    def before_step(optimizer: Any, caller: FrameType) -> None:
        callers.clear()
        callers[id(optimizer)] = caller

    def after_step(optimizer: Any) -> None:
        caller = callers.pop(id(optimizer), None)
        if caller is None or state.memory is None:
            return
        counts = seen.get(optimizer)
        if counts is None:
            counts = [0, -1]
            seen.set(optimizer, counts)
        counts[0] = count = counts[0] + 1
        if count <= 8 or not count % 16:  # (see the docstring)
            grads = [p.grad for group in optimizer.param_groups for p in group["params"]]
            _observe_all(grads, _GRAD, state.memory.backward_line or caller, state)
        with_state = len(optimizer.state)
        if with_state != counts[1]:
            counts[1] = with_state
            held = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
            step = SimpleNamespace(name=f"{type(optimizer).__name__}.step")
            _observe_all(held, step, caller, state)

    return [optimizers.subscribe(optimizers.Subscriber(before_step, after_step))]


def _observe_all(tensors: list[Any], op: Any, caller: Any, state: Any) -> None:
    """``tensors`` (``None`` among them is passed over) to the books, as an op's results."""
    if len(tensors) <= 64:
        observe_op(op, (), None, tensors, caller, state)
        return
    for start in range(0, len(tensors), 64):  # (an op's results are looked at 64 at most)
        observe_op(op, (), None, tensors[start : start + 64], caller, state)


def _native_hooks() -> tuple[Any, Any]:
    """``_after`` and ``before_backward`` in C (``_fastpath.books_after``: ``_add`` and
    ``_insert`` for a plain storage under its device's peak and limit, the Python methods for
    the rest, :func:`after_backward` for an op returning ``None`` where reading ``.grad`` could
    run Python (a mode on the stack, a leaf of a tensor subclass); ``books_before_backward``,
    :func:`before_backward` for a line whose leaves are not known yet) where it is built."""
    fastpath = native.fastpath
    if fastpath is None:
        return _after, before_backward
    fastpath.configure_books(
        frames._KIND,
        _PATHS,
        _DEVICE_NAMES,
        frames.USER,
        frames.LIBRARY,
        _expired,
        _free_weak_ref,
        before_backward,
        after_backward,
        _GRAD,
    )
    return fastpath.books_after, fastpath.books_before_backward


#: an op's results to the watch's books (``state.memory``): ``_after``, in C where built; the
#: line of a ``backward()``: :func:`before_backward`, in C where built
observe_op, note_backward = _native_hooks()

#: what the engine's planner reads of a rule module (:mod:`tensor_dap.agent.plans`)
PLAN_HOOKS = SimpleNamespace(
    RULE=SimpleNamespace(needs_accelerator=False),
    after=observe_op,
    applies=_applies,
    before=note_backward,
    applies_before=applies_before,
    applies_passthrough=applies_passthrough,
    install=install,
)
