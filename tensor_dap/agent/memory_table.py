"""Which lines made the tensors holding a device's memory, as a stop's message shows it.

The ``memory-limit`` and ``out-of-memory`` stops name the device, its live tensor bytes and the
user lines whose ops made them, largest first. When the watch keeps the books
(:class:`~tensor_dap.agent.memory.MemoryLedger`: a memory limit is set, or ``check --memory``)
they come from there; otherwise (an out-of-memory error in a run keeping no books, the default)
the live tensors are found once, at the error, among the objects the garbage collector tracks,
each storage counted once, under the line the watch's provenance saw make it. That misses
tensors only autograd holds (saved for backward) and those made by ops the watch did not
sample, which are counted under "line not recorded".
"""

from __future__ import annotations

import gc
import os
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from tensor_dap.agent.memory import Site, ranked_rows
from tensor_dap.agent.storage import real_storages
from tensor_dap.tensor_text import size_text

_Tensor = torch.Tensor

#: rows a stop's message lists
SHOWN = 5


def live_table(state: Any, device: str) -> tuple[int, list[dict[str, Any]]]:
    """``(live bytes, rows)`` on ``device``: the ledger's when the watch keeps one."""
    ledger = getattr(state, "memory", None)
    if ledger is not None:
        return ledger.live_top(device)  # type: ignore[no-any-return]
    return scan(state.provenance, device)


def scan(provenance: Any, device: str) -> tuple[int, list[dict[str, Any]]]:
    """The live tensors on ``device`` the garbage collector tracks, by the line that made them."""
    seen: set[int] = set()
    sites: dict[Site, tuple[int, int]] = {}
    total = 0
    with torch._C.DisableTorchFunction():
        for obj in gc.get_objects():
            # (the type, not isinstance: that reads ``__class__``, which some lazy module
            # attributes answer with a deprecation warning)
            if not issubclass(type(obj), _Tensor):
                continue
            try:
                if str(obj.device) != device:
                    continue
                storages = real_storages(obj)
            except Exception:  # a tensor without storage (fake, sparse...): not counted
                continue
            for storage in storages:
                key = StorageWeakRef(storage).cdata  # type: ignore[no-untyped-call]
                if key in seen:
                    continue
                seen.add(key)
                nbytes = int(storage.nbytes())
                prov = provenance.lookup(obj)
                site = (prov.path, prov.line, prov.op) if prov is not None else ("", 0, "")
                held, count = sites.get(site, (0, 0))
                sites[site] = (held + nbytes, count + 1)
                total += nbytes
    return total, ranked_rows(sites)


def table_text(rows: list[dict[str, Any]]) -> str:
    """``"train.py:12 zeros 4.0 GiB (2 tensors); ..."``: the first :data:`SHOWN` rows (files by
    name, as the other rules' messages give where a tensor was created)."""
    parts = []
    for row in rows[:SHOWN]:
        count = row["count"]
        tensors = f"{count} tensor{'s' if count != 1 else ''}"
        if row["line"]:
            where = f"{os.path.basename(row['path'])}:{row['line']} {row['op']}"
        else:
            where = "line not recorded" if not row["op"] else f"library code {row['op']}"
        parts.append(f"{where} {size_text(row['bytes'])} ({tensors})")
    return "; ".join(parts) if parts else "no tensor seen"
