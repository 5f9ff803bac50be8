"""What the trace saw, as trace-store rows, so the editor shows it inline.

One entry per (file, line, variable): the last value seen after that line ran — a tensor, a
module or a list/tuple/dict of tensors, described as the ``check`` recorder describes them
(:mod:`tensor_dap.agent.value_summary`) — how often it changed there, and whether its shape
varied. Bounded by the size of the code, not the number of steps. It has the interface
:class:`tensor_dap.agent.trace_session.TraceSession` expects of a recorder (``paths()``,
``observations(line_hits)``), so ``trace`` writes the store exactly like ``check`` does.
"""

from __future__ import annotations

import os
from types import CodeType
from typing import Any, Optional

from tensor_dap.agent.recorder import statement_end_col
from tensor_dap.agent.value_summary import describe, observation
from tensor_dap.tracedb import Observation


class LineStore:
    def __init__(self, process: str = "main") -> None:
        self.process = process
        #: (id(code), line, name) -> [summary, hits, shape_varied, code, meta]
        self._rows: dict[tuple[int, int, str], list[Any]] = {}
        self._cols: dict[tuple[str, int], Optional[int]] = {}

    def observe(self, code: CodeType, line: int, name: str, value: Any, meta: Any) -> None:
        """``value`` was bound to ``name`` by ``line``; ``meta``: its cheap metadata key (the
        value is described again only when it changes)."""
        key = (id(code), line, name)
        row = self._rows.get(key)
        if row is None:
            summary = describe(value)
            if summary is not None:
                self._rows[key] = [summary, 1, False, code, meta]
            return
        row[1] += 1
        if row[4] != meta:
            summary = describe(value)
            if summary is None:
                return
            if row[0].shape != summary.shape or row[0].text != summary.text:
                row[2] = True
            row[0], row[4] = summary, meta

    def paths(self) -> set[str]:
        return {os.path.abspath(row[3].co_filename) for row in list(self._rows.values())}

    def observations(self, line_hits: Any = None) -> list[Observation]:
        """Rows for the store (safe to call from the session's flushing thread)."""
        rows = []
        for (_, line, name), (summary, hits, varied, code, _meta) in list(self._rows.items()):
            col = self._col(os.path.abspath(code.co_filename), line)
            rows.append(observation(summary, code, line, name, hits, varied, self.process, col))
        return rows

    def _col(self, path: str, line: int) -> Optional[int]:
        key = (path, line)
        if key not in self._cols:
            try:
                self._cols[key] = statement_end_col(path, line)
            except Exception:
                self._cols[key] = None
        return self._cols[key]
