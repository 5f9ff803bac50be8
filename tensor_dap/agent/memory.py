"""Live tensor memory per device, its peak, and the user lines that made it (``check --memory``).

Every op's tensor results (one level deep) are looked at; each *storage* is counted once, when
first seen (a view, ``detach()`` or ``.data`` alias shares its base's storage; a wrapper
subclass counts the storages of the tensors it wraps), on ``str(tensor.device)``, under the
user line whose op made it. A storage is held through a ``StorageWeakRef``: a weak reference to
the storage itself, so a tensor autograd saved for backward still counts after the Python tensor
is gone, and nothing here keeps any memory alive.

Frees are not announced, so they are found by sweeping the table for expired storages. A sweep
runs when the live total would pass the peak: the peak is then the true live total, and the top
lines at it are the per-line totals of that moment (copied when the next sweep is about to take
memory away). To keep the cost per op bounded, a sweep that finds nothing freed doubles the
number of storages made before the next one (at most a quarter of the live ones), and one
that finds something brings it back to 1: while memory only grows, sweeps are rare; once it is
freed and reused, every new peak is swept. A peak reached between two spaced sweeps may include
storages freed since the last one.

Not seen: tensors made outside torch functions (the gradients autograd's engine writes into
``.grad``, buffers an op allocates and frees internally, intermediate results saved inside a
composite op such as ``cross_entropy``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import FrameType, SimpleNamespace
from typing import Any, Optional

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from tensor_dap.agent import frames
from tensor_dap.agent.storage import real_storages

#: lines kept in a device's ``top``
TOP = 10

_Tensor = torch.Tensor
Site = tuple[str, int, str]


@dataclass
class _Entry:
    ref: Any
    device: str
    nbytes: int
    site: Site


class MemoryLedger:
    """What :mod:`tensor_dap.agent.memory` says: ``observe`` each op's result, ``summary``."""

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
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

    def observe(self, out: Any, op: str, caller: FrameType) -> None:
        if isinstance(out, _Tensor):
            self._add(out, op, caller)
        elif isinstance(out, (tuple, list)):
            for item in out[:64]:
                if isinstance(item, _Tensor):
                    self._add(item, op, caller)

    def _add(self, tensor: Any, op: str, caller: FrameType) -> None:
        device: Optional[str] = None
        for storage in real_storages(tensor):
            # the storage's address names it (as its weak reference would): a storage seen
            # before (a view, an in-place result) costs one lookup and makes no weak reference
            key = storage._cdata
            entry = self._entries.get(key)
            if entry is not None and not entry.ref.expired():
                continue
            if device is None:
                device = str(tensor.device)
            if entry is not None:
                self._drop(key, entry)
            ref = StorageWeakRef(storage)  # type: ignore[no-untyped-call]
            self._insert(ref, device, int(storage.nbytes()), _site(op, caller))

    def _insert(self, ref: Any, device: str, nbytes: int, site: Site) -> None:
        self._since_sweep += 1
        peak = self._peak.get(device, 0)
        if self._live.get(device, 0) + nbytes > peak and self._sweep_due():
            self.sweep()
        self._entries[ref.cdata] = _Entry(ref, device, nbytes, site)
        live = self._live[device] = self._live.get(device, 0) + nbytes
        sites = self._by_site.setdefault(device, {})
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
        expired = [(key, e) for key, e in self._entries.items() if e.ref.expired()]
        self._interval = 1 if expired else self._interval * 2
        for device in {e.device for _, e in expired} & self._pending:
            self._snapshot(device)
        for key, entry in expired:
            self._drop(key, entry)
        if self._over and self.limit is not None:
            self._over = {d for d in self._over if self._live.get(d, 0) > self.limit}

    def _drop(self, key: int, entry: _Entry) -> None:
        del self._entries[key]
        self._live[entry.device] -= entry.nbytes
        sites = self._by_site[entry.device]
        sites[entry.site] -= entry.nbytes
        if not sites[entry.site]:
            del sites[entry.site]

    def _counts(self, device: str) -> dict[Site, int]:
        counts: dict[Site, int] = {}
        for entry in self._entries.values():
            if entry.device == device:
                counts[entry.site] = counts.get(entry.site, 0) + 1
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
        entry = self._entries.get(StorageWeakRef(storage).cdata)  # type: ignore[no-untyped-call]
        return entry.site if entry is not None and not entry.ref.expired() else None

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


def _site(op: str, caller: FrameType) -> Site:
    user = frames.user_frame(caller)
    if user is None:
        return ("", 0, op)
    name = user.f_code.co_filename
    path = _PATHS.get(name)
    if path is None:
        path = _PATHS[name] = os.path.abspath(name)
    return (path, user.f_lineno, op)


#: the name the bookkeeping goes by in a watch's plans (no rule has it)
PLAN_ID = "memory"


def _after(op: Any, args: Any, kwargs: Any, out: Any, caller: FrameType, state: Any) -> None:
    """Planned like a rule's ``after`` on every op, so both engine paths run it."""
    state.memory.observe(out, op.name, caller)


def _applies(op: Any) -> bool:
    """Not planned on in-place ops (their result is a storage already counted: ``optimizer.step()``
    runs dozens) nor on ``backward()`` (it returns nothing)."""
    return not (op.inplace or op.backward)


#: what the engine's planner reads of a rule module (:mod:`tensor_dap.agent.plans`)
PLAN_HOOKS = SimpleNamespace(
    RULE=SimpleNamespace(needs_accelerator=False), after=_after, applies=_applies
)
