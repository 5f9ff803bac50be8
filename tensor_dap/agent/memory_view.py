"""The memory view while paused: live tensor memory per device, by the user line that made it,
and who holds it.

Asked for by the adapter's ``evaluate`` of ``tensor-dap memory`` (see
:mod:`tensor_dap.adapter.memory_requests`), in the paused frame; nothing runs while the program
does. At the pause it gathers the tensors Python can reach (the garbage collector tracks every
tensor object; the paused frames, modules and optimizers name them — see
:mod:`tensor_dap.agent.memory_holders` — and live autograd graphs give back the tensors they
saved for backward), and counts each *storage* once (views, ``detach()`` and ``.data``
aliases share their base's; a wrapper subclass counts the storages it wraps, on its own device).

A storage's line is, best first: the memory books' (``watch.memory``, when they run), the
engine's provenance of the tensor owning the storage (or of the graph node that made it, for a
tensor autograd saved), a view's, and for a frame's variable the line that last assigned it. The
engine records provenance for a sample of each line's ops (the first 8, then one in 64), so a
tensor it did not sample, held by no variable, has no line; neither have tensors made unwatched
(gradients autograd's engine writes, optimizer state made inside ``step()``), which are put
apart by what made them.

Nothing is kept: the result is plain numbers and strings, and every tensor object gathered
here is dropped on return. Reads metadata only (storage sizes and addresses): no device sync, no
change to autograd, and no torch function mode sees it.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, Optional

import torch

from tensor_dap.agent import frames as frame_kinds
from tensor_dap.agent import naming
from tensor_dap.agent.graph_nodes import graph_node
from tensor_dap.agent.memory_holders import Holder, graph_holders, named_tensors
from tensor_dap.agent.provenance import NODE_PROV_KEY
from tensor_dap.agent.storage import real_storages

if TYPE_CHECKING:
    from tensor_dap.agent.engine import Watch

_Tensor = torch.Tensor
#: what holds tensors by name besides frames
_HOLDING = (torch.nn.Module, torch.optim.Optimizer)
Site = tuple[str, int, str]
NO_SITE: Site = ("", 0, "")

#: lines listed per device, holders per line (the rest summed up)
MAX_LINES = 200
MAX_HOLDERS = 50

_watch: Optional[Watch] = None


def bind(watch: Watch) -> None:
    """The watch whose provenance (and memory books, if any) name the lines."""
    global _watch
    _watch = watch


@dataclass
class _Storage:
    device: str
    nbytes: int
    #: the device came from a wrapper subclass (it outranks the wrapped tensor's own)
    wrapped: bool = False
    site: Site = NO_SITE
    #: how good ``site`` is (lower is better; see :func:`_candidates`)
    rank: int = 99
    holders: dict[str, str] = field(default_factory=dict)


def table() -> Any:
    """What ``tensor-dap memory`` evaluates to: the table text with expandable rows."""
    from tensor_dap.render.memory import MemoryTable

    return MemoryTable(snapshot())


def as_json() -> str:
    """The same, as JSON (VS Code's Tensor Memory view)."""
    return json.dumps(snapshot())


def snapshot(watch: Optional[Watch] = None) -> dict[str, Any]:
    """``{"devices": [{device, bytes, count, lines: [{path, line, op, bytes, count,
    holders: [{kind, name, bytes}]}]}]}``, devices by name, lines and holders largest first;
    lines named by ``watch`` (default: the one :func:`bind` gave)."""
    collecting = gc.isenabled()
    gc.disable()  # a collection while holding every object in a list would walk them all
    try:
        with torch._C.DisableTorchFunction():
            storages = _storages(paused_user_frames(), watch or _watch)
    finally:
        if collecting:
            gc.enable()
    return _grouped(storages)


def paused_user_frames() -> list[FrameType]:
    """The user's frames of every thread, each thread's outermost first."""
    found: list[FrameType] = []
    for top in sys._current_frames().values():
        chain = []
        frame: Optional[FrameType] = top
        while frame is not None:
            code = frame.f_code
            if frame_kinds.is_user_code(code) and not code.co_filename.startswith("<"):
                chain.append(frame)
            frame = frame.f_back
        found.extend(reversed(chain))
    return found


def _storages(user_frames: list[FrameType], watch: Optional[Watch]) -> dict[int, _Storage]:
    # one pass over the garbage collector's objects (type(), not isinstance: a lazy module's
    # __class__ may warn or import)
    everything: list[Any] = []
    others: list[Any] = []
    for obj in gc.get_objects():
        kind = type(obj)
        if issubclass(kind, _Tensor):
            everything.append(obj)
        elif issubclass(kind, _HOLDING):
            others.append(obj)
    held: list[tuple[Any, Optional[Holder], Optional[FrameType]]] = []
    held.extend(named_tensors(user_frames, others))
    del others
    roots = [
        (t, h.name) for t, h, _ in held if h and h.kind == "local" and graph_node(t) is not None
    ]
    roots += [(t, "an unnamed tensor") for t in everything if graph_node(t) is not None]
    held.extend(graph_holders(roots))
    held.extend((t, None, None) for t in everything)
    table: dict[int, _Storage] = {}
    seen: set[int] = set()
    index = 0
    while index < len(held):
        tensor, holder, frame = held[index]
        index += 1
        base = tensor._base
        if base is not None and id(base) not in seen:
            held.append((base, None, None))
        _add(table, tensor, holder, frame, watch, first=id(tensor) not in seen)
        seen.add(id(tensor))
    return table


def _add(
    table: dict[int, _Storage],
    tensor: Any,
    holder: Optional[Holder],
    frame: Optional[FrameType],
    watch: Optional[Watch],
    first: bool,
) -> None:
    storages = real_storages(tensor)
    if not storages:
        return
    wrapped = _own_address(tensor) == 0
    for storage in storages:
        address = int(storage.data_ptr())
        record = table.get(address)
        if record is None:
            record = table[address] = _Storage(str(tensor.device), int(storage.nbytes()))
        if wrapped and not record.wrapped:
            record.device, record.wrapped = str(tensor.device), True
        if holder is not None:
            record.holders.setdefault(holder.name, holder.kind)
        if first or frame is not None:
            found = _better_site(watch, tensor, storage, holder, frame, record.rank)
            if found is not None:
                record.rank, record.site = found


def _own_address(tensor: Any) -> int:
    try:
        return int(tensor.untyped_storage().data_ptr())
    except Exception:
        return 0


def _better_site(
    watch: Optional[Watch],
    tensor: Any,
    storage: Any,
    holder: Optional[Holder],
    frame: Optional[FrameType],
    better: int,
) -> Optional[tuple[int, Site]]:
    """The best site this tensor knows for ``storage``, if it ranks better than ``better``:
    0 the memory books, 1 the owner's provenance, 2 its graph node's, 3 a view's, 4 the line
    that assigned a frame's variable."""
    owner = tensor._base is None
    if watch is not None:
        if better > 0 and watch.memory is not None:
            site = watch.memory.site_of(storage)
            if site is not None and site[1]:
                return 0, site
        rank = 1 if owner else 3
        if better > rank:
            prov = watch.provenance.lookup(tensor)
            if prov is not None:
                return rank, _as_site(prov)
    node = graph_node(tensor) if better > 2 and owner else None
    if node is not None:
        metadata = getattr(node, "metadata", None)
        prov = metadata.get(NODE_PROV_KEY) if isinstance(metadata, dict) else None
        if prov is not None:
            return 2, _as_site(prov)
    if better > 4 and frame is not None and holder is not None:
        prov = naming.assigned_before(frame, holder.name.split(" ", 1)[0])
        if prov is not None:
            return 4, _as_site(prov)
    return None


#: a Prov's file -> its absolute path (``abspath`` costs microseconds)
_PATHS: dict[str, str] = {}


def _as_site(prov: Any) -> Site:
    path = _PATHS.get(prov.path)
    if path is None:
        path = _PATHS[prov.path] = os.path.abspath(prov.path)
    return (path, int(prov.line), str(prov.op))


def _grouped(table: dict[int, _Storage]) -> dict[str, Any]:
    by_device: dict[str, dict[Site, list[_Storage]]] = {}
    for record in table.values():
        if record.nbytes:
            site = record.site if record.site[1] else _unrecorded(record)
            by_device.setdefault(record.device, {}).setdefault(site, []).append(record)
    devices = []
    for device in sorted(by_device):
        lines = [_line(site, records) for site, records in by_device[device].items()]
        lines.sort(key=lambda row: (-row["bytes"], row["path"], row["line"], row["op"]))
        devices.append(
            {
                "device": device,
                "bytes": sum(row["bytes"] for row in lines),
                "count": sum(row["count"] for row in lines),
                "lines": lines[:MAX_LINES],
            }
        )
    return {"devices": devices}


#: what made a tensor no line is known for, by the kind of all its holders
_MADE_BY = {"grad": "by backward()", "optimizer": "by optimizer.step()"}


def _unrecorded(record: _Storage) -> Site:
    """No line: the tensors the engine never watches being made go apart (gradients written by
    autograd's engine, optimizer state made inside ``step()``, which runs unwatched)."""
    kinds = set(record.holders.values())
    made_by = _MADE_BY.get(kinds.pop(), "") if len(kinds) == 1 else ""
    return ("", 0, made_by)


def _line(site: Site, records: list[_Storage]) -> dict[str, Any]:
    holders: dict[str, list[Any]] = {}
    nameless = [0, 0]
    for record in records:
        if not record.holders:
            nameless[0] += record.nbytes
            nameless[1] += 1
        for name, kind in record.holders.items():
            entry = holders.setdefault(name, [kind, 0])
            entry[1] += record.nbytes
    rows = [{"kind": k, "name": n, "bytes": b} for n, (k, b) in holders.items()]
    rows.sort(key=lambda row: (-row["bytes"], row["name"]))
    if len(rows) > MAX_HOLDERS:
        rest = rows[MAX_HOLDERS:]
        rows = rows[:MAX_HOLDERS]
        rows.append({"kind": "more", "name": f"{len(rest)} more", "bytes": 0})
    if nameless[1]:
        noun = "tensor" if nameless[1] == 1 else "tensors"
        name = f"nothing nameable ({nameless[1]} {noun})"
        rows.append({"kind": "none", "name": name, "bytes": nameless[0]})
    path, line, op = site
    return {
        "path": path,
        "line": line,
        "op": op,
        "bytes": sum(r.nbytes for r in records),
        "count": len(records),
        "holders": rows,
    }
