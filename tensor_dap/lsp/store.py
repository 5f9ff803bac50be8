"""The language server's view of the trace store: lazy, cached, and never fatal.

:class:`TraceStore` opens a :class:`~tensor_dap.tracedb.TraceReader` on first use, caches what it
read per file, and drops the cache when the store's ``data_version()`` changes (checked on each
read and by the server's poll). A missing, empty, locked, truncated or corrupt store answers empty
results; what is wrong is queued once as a message for ``window/logMessage`` (again only after the
store recovered and broke anew). Methods are thread-safe: the server calls them off its event loop.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from lsprotocol import types

from tensor_dap.findings import Finding
from tensor_dap.tracedb import (
    Observation,
    TraceReader,
    TraceStoreError,
    observation_from_row,
)

_NO_VERSION = -1


_COLUMNS = (
    "NULL, line, name, shape_json, dtype, device, requires_grad, grad_fn, hits, shape_varied, "
    "process, col, last_run_id, summary, detail"
)
"""The columns of a row (:data:`Row`), in this order; the path is left out (NULL), the file's
rows all have the same."""

Row = tuple[Any, ...]
"""One ``observations`` row as SQLite returns it (see :data:`_COLUMNS`)."""

LINE, NAME, SHAPE_JSON, DTYPE, DEVICE, REQUIRES_GRAD, GRAD_FN = 1, 2, 3, 4, 5, 6, 7
PROCESS, COL, LAST_RUN_ID, SUMMARY, DETAIL = 10, 11, 12, 13, 14


def observation(row: Row, path: str) -> Observation:
    """The :class:`Observation` of a row of ``path`` (the row's own path column is NULL)."""
    return observation_from_row(row, path)


class Lines(Mapping[int, list[Observation]]):
    """Observations per 1-based line, in the store's order (name, then process), built from the
    rows of one line only when that line is asked for (a hover, an inline value)."""

    def __init__(
        self, rows: list[Row], path: str = "", spans: Optional[dict[int, tuple[int, int]]] = None
    ) -> None:
        self.rows = rows
        self.path = path
        self.spans: dict[int, tuple[int, int]] = {}
        """Line -> the slice of ``rows`` on it; in line order (the rows are sorted). Given
        ``spans`` place the rows on other lines (a document edited since the run: the rows keep
        the run's line numbers, the spans say where those lines are now)."""
        if spans is not None:
            self.spans = spans
        else:
            start = 0
            for index in range(1, len(rows) + 1):
                if index == len(rows) or rows[index][LINE] != rows[start][LINE]:
                    self.spans[int(rows[start][LINE])] = (start, index)
                    start = index
        self._built: dict[int, list[Observation]] = {}

    def rows_of(self, line: int) -> list[Row]:
        span = self.spans.get(line)
        return self.rows[span[0] : span[1]] if span else []

    def __getitem__(self, line: int) -> list[Observation]:
        built = self._built.get(line)
        if built is None:
            if line not in self.spans:
                raise KeyError(line)
            built = self._built[line] = [observation(r, self.path) for r in self.rows_of(line)]
            for obs in built:
                obs.line = line  # the run's line number, where the document was edited since
        return built

    def __contains__(self, line: object) -> bool:
        return line in self.spans

    def __iter__(self) -> Iterator[int]:
        return iter(self.spans)

    def __len__(self) -> int:
        return len(self.spans)


class FileData:
    """What the store holds about one source file: its observation rows (as SQLite returns them,
    turned into :class:`Observation` objects per line on demand), the findings of the latest run
    that observed the file (else of the latest run), the digest of the file's text as the
    run saw it (None when not recorded), that text (None when not kept) and which runs
    simulated their devices (run id -> kind, ``--simulate cuda``)."""

    def __init__(
        self,
        rows: Sequence[Row] = (),
        findings: Sequence[Finding] = (),
        digest: Optional[str] = None,
        path: str = "",
        source_text: Optional[str] = None,
        by_line: Optional[Lines] = None,
        simulated: Optional[dict[int, str]] = None,
    ) -> None:
        self.by_line = by_line if by_line is not None else Lines(list(rows), path)
        self.findings = list(findings)
        self.digest = digest
        self.source_text = source_text
        self.simulated = simulated or {}
        self.memo: dict[Any, Any] = {}
        """Results the features derived from this data (dropped with it when the store
        changes)."""

    @property
    def observations(self) -> list[Observation]:
        return [obs for line in self.by_line for obs in self.by_line[line]]


class _Reader(TraceReader):
    """The trace reader, with the one query the server needs per file: its rows, unconverted
    (converting 20,000 rows to :class:`Observation` objects costs ~0.4 s)."""

    def observation_rows(self, path: str) -> list[Row]:
        return self.select_observations(
            _COLUMNS, "WHERE path = ? ORDER BY line, name, process", (path,)
        )


EMPTY = FileData()


class TraceStore:
    """One trace store file, read on demand. ``path`` None: no workspace, nothing to read."""

    def __init__(self, path: Optional[Path] = None) -> None:
        self._lock = threading.RLock()
        self._path = path
        self._reader: Optional[_Reader] = None
        self._cache: dict[str, FileData] = {}
        self._version = _NO_VERSION
        self._polled_version = _NO_VERSION
        self._problem: Optional[str] = None
        self._messages: list[tuple[types.MessageType, str]] = []

    @property
    def path(self) -> Optional[Path]:
        return self._path

    def set_path(self, path: Optional[Path]) -> None:
        """Read another file from now on (the workspace root became known)."""
        with self._lock:
            if path == self._path:
                return
            self._close()
            self._path = path
            self._cache.clear()
            self._version = self._polled_version = _NO_VERSION
            self._problem = None

    def file(self, path: str) -> FileData:
        """What the store holds about ``path`` (an absolute file system path)."""
        with self._lock:
            reader = self._open()
            if reader is None:
                return EMPTY
            try:
                self._check_version(reader)
                cached = self._cache.get(path)
                if cached is None:
                    cached = self._load(reader, path)
                    self._cache[path] = cached
                self._healthy()
                return cached
            except (TraceStoreError, sqlite3.Error, OSError) as error:
                self._fail(str(error))
                return EMPTY

    def poll(self) -> bool:
        """Check ``data_version()``; True when it changed since the previous poll."""
        with self._lock:
            reader = self._open()
            version = _NO_VERSION
            if reader is not None:
                try:
                    self._check_version(reader)
                    version = self._version
                    self._healthy()
                except (TraceStoreError, sqlite3.Error, OSError) as error:
                    self._fail(str(error))
            changed = version != self._polled_version
            self._polled_version = version
            return changed

    def take_messages(self) -> list[tuple[types.MessageType, str]]:
        """The messages queued since the last call, for ``window/logMessage``."""
        with self._lock:
            messages, self._messages = self._messages, []
            return messages

    def close(self) -> None:
        with self._lock:
            self._close()

    # -- internals ----------------------------------------------------------------------------

    def _open(self) -> Optional[_Reader]:
        if self._path is None:
            return None
        if self._reader is None:
            try:
                self._reader = _Reader(self._path)
            except (TraceStoreError, sqlite3.Error, OSError) as error:
                self._fail(str(error))
                return None
        try:
            available = self._reader.available
        except (TraceStoreError, sqlite3.Error, OSError) as error:
            self._fail(str(error))
            return None
        if not available:
            self._cache.clear()
            self._version = _NO_VERSION
            self._report(
                types.MessageType.Info,
                f"tensor-dap: no trace store at {self._path} yet; debug a script (F5) or run "
                "`tensor-dap check SCRIPT` in the workspace folder to see shapes and findings "
                "in the editor.",
            )
            return None
        return self._reader

    def _check_version(self, reader: _Reader) -> None:
        version = reader.data_version()
        if version != self._version:
            self._cache.clear()
            self._version = version

    def _load(self, reader: _Reader, path: str) -> FileData:
        rows = reader.observation_rows(path)
        if not rows:
            real = os.path.realpath(path)
            if real != path:
                rows = reader.observation_rows(real)
                if rows:
                    path = real
        run_ids = [r[LAST_RUN_ID] for r in rows if r[LAST_RUN_ID] is not None]
        findings = reader.findings_for(path, max(run_ids) if run_ids else None)
        digest = reader.source_digest(path)
        text = reader.source_text(path) if digest is not None else None
        simulated = reader.simulated_runs() if rows else {}
        return FileData(rows, findings, digest, path, text, simulated=simulated)

    def _fail(self, problem: str) -> None:
        self._close()
        self._cache.clear()
        self._version = _NO_VERSION
        self._report(
            types.MessageType.Warning,
            f"tensor-dap: cannot read the trace store: {problem} "
            "(hints and findings are off until it can be read again)",
        )

    def _report(self, kind: types.MessageType, text: str) -> None:
        if text != self._problem:
            self._problem = text
            self._messages.append((kind, text))

    def _healthy(self) -> None:
        self._problem = None

    def _close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()
