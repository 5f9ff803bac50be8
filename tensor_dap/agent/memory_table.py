"""Which lines made the tensors holding a device's memory, as a stop's message shows it.

The ``memory-limit`` and ``out-of-memory`` stops name the device, its live tensor bytes and the
user lines whose ops made them, largest first. When the watch keeps the books
(:class:`~tensor_dap.agent.memory.MemoryLedger`: a memory limit is set, or ``check --memory``)
they come from there; otherwise (an out-of-memory error in a run keeping no books, the default)
they are found once, at the error, as the memory view finds them while paused (tensors made by
ops the watch did not sample are under "line not recorded").
"""

from __future__ import annotations

import os
from typing import Any

from tensor_dap.agent import memory_view
from tensor_dap.tensor_text import size_text

#: rows a stop's message lists
SHOWN = 5


def live_table(state: Any, device: str) -> tuple[int, list[dict[str, Any]]]:
    """``(live bytes, rows)`` on ``device``: the ledger's when the watch keeps one."""
    ledger = getattr(state, "memory", None)
    if ledger is not None:
        return ledger.live_top(device)  # type: ignore[no-any-return]
    return scan(state, device)


def scan(watch: Any, device: str) -> tuple[int, list[dict[str, Any]]]:
    """The live tensors on ``device``, by the line that made them: the memory view's snapshot
    (:mod:`tensor_dap.agent.memory_view`: the tensors Python reaches and those live graphs
    saved, each storage once) of that device."""
    for row in memory_view.snapshot(watch)["devices"]:
        if row["device"] == device:
            return row["bytes"], row["lines"]
    return 0, []


def table_text(rows: list[dict[str, Any]]) -> str:
    """``"train.py:12 zeros 4.0 GiB (2 tensors); ..."``: the first :data:`SHOWN` rows (files by
    name, as the other rules' messages give where a tensor was created)."""
    parts = []
    for row in rows[:SHOWN]:
        count = row["count"]
        tensors = f"{count} tensor{'s' if count != 1 else ''}"
        if row["line"]:
            where = f"{os.path.basename(row['path'])}:{row['line']} {row['op']}"
        elif row["op"].startswith("by "):  # the memory view's: gradients, optimizer state
            where = f"made {row['op']}"
        else:
            where = "line not recorded" if not row["op"] else f"library code {row['op']}"
        parts.append(f"{where} {size_text(row['bytes'])} ({tensors})")
    return "; ".join(parts) if parts else "no tensor seen"
