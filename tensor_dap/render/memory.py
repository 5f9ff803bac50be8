"""The memory view as a debugger shows it: a table for the debug console, rows to expand.

``tensor-dap memory`` (:mod:`tensor_dap.agent.memory_view`) evaluates to a :class:`MemoryTable`
built from its snapshot: plain numbers and strings, no tensor. In the debug console (``repl``)
its value is the whole table; in VARIABLES or WATCH a one-line total, expanded per device ->
per line (``train.py:12 mul``) -> the names holding that line's tensors.
"""

from __future__ import annotations

import os
from typing import Any

from tensor_dap.render.base import Entry, Text, plural
from tensor_dap.tensor_text import size_text


def where(row: dict[str, Any]) -> str:
    """``train.py:12`` (relative to the working folder when inside it), or why there is none."""
    if not row.get("line"):
        return "(no line recorded)"
    path = str(row["path"])
    try:
        relative = os.path.relpath(path)
        path = relative if not relative.startswith("..") else path
    except ValueError:
        pass
    return f"{path}:{row['line']}"


#: a holder's kind as its row in VARIABLES says it (the VS Code view says the same)
KIND_WORDS = {
    "local": "variable",
    "parameter": "parameter",
    "buffer": "buffer",
    "grad": "gradient",
    "optimizer": "optimizer state",
    "graph": "saved for backward",
}


def _total(row: dict[str, Any]) -> str:
    return f"{size_text(row['bytes'])} in {plural(row['count'], 'tensor')}"


class MemoryLine:
    """One creation line of one device."""

    __slots__ = ("row",)

    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row

    def title(self) -> str:
        row = self.row
        return f"{where(row)} {row['op']}".rstrip()

    def value_line(self) -> str:
        return _total(self.row)

    def children(self) -> list[Entry]:
        entries = []
        for holder in self.row["holders"]:
            words = [size_text(holder["bytes"]), KIND_WORDS.get(holder["kind"], "")]
            entries.append(Entry(holder["name"], Text(" · ".join(w for w in words if w))))
        return entries

    def __repr__(self) -> str:
        row = self.row
        count = plural(row["count"], "tensor")
        head = f"{size_text(row['bytes']):>10}  {count:>11}  {self.title()}"
        holders = [f"{'':>18}{size_text(h['bytes']):>10}  {h['name']}" for h in row["holders"]]
        return "\n".join([head, *holders])


class MemoryDevice:
    """One device's live tensor memory, by line."""

    __slots__ = ("row",)

    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row

    def value_line(self) -> str:
        return _total(self.row)

    def children(self) -> list[Entry]:
        lines = [MemoryLine(row) for row in self.row["lines"]]
        return [Entry(line.title(), line) for line in lines]

    def __repr__(self) -> str:
        head = f"{self.row['device']}: {self.value_line()}"
        return "\n".join([head, *(repr(MemoryLine(row)) for row in self.row["lines"])])


class MemoryTable:
    """Every device's, the value of ``tensor-dap memory``."""

    __slots__ = ("data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def value_line(self) -> str:
        devices = self.data["devices"]
        if not devices:
            return "no live tensors"
        return "; ".join(f"{d['device']} {_total(d)}" for d in devices)

    def children(self) -> list[Entry]:
        return [Entry(d["device"], MemoryDevice(d)) for d in self.data["devices"]]

    def __repr__(self) -> str:
        parts = ["live tensor memory (each storage once), by the line that made it"]
        parts += [repr(MemoryDevice(d)) for d in self.data["devices"]] or ["no live tensors"]
        return "\n".join(parts)
