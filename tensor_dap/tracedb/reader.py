"""Reading the trace store for the language server, while runs may be writing it.

The connection is read-only (``mode=ro``) and never takes a write lock, so it cannot slow a run
down; in WAL mode each query sees the last committed state even during a write transaction. The
file may not exist yet (no run so far), may appear, or may be replaced by a fresh one: the reader
follows it, answering empty results (and ``available`` False) while there is nothing to read.
A corrupt or foreign file raises :class:`TraceStoreError`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
import sqlite3
import threading
from typing import Any, Callable, Optional, TypeVar, Union

from tensor_dap.findings import Finding, MalformedFinding

from . import schema
from .connection import open_reader, retrying
from .errors import TraceStoreError
from .records import SIMULATE_FLAG, Observation, RunInfo, process_of_label, simulated_kind

T = TypeVar("T")
log = logging.getLogger("tensor_dap.tracedb")

_OBSERVATION_COLUMNS = (
    "path, line, name, shape_json, dtype, device, requires_grad, grad_fn, hits, shape_varied, "
    "process, col, last_run_id, summary, detail"
)
VERSION_2_COLUMNS = {"summary": "NULL", "detail": "NULL"}
"""Columns a version 2 store (not migrated yet: only writers migrate) lacks, and what to
select instead."""
_RUN_COLUMNS = "run_id, started, ended, argv_json, cwd, exit_json, command"


def observation_from_row(row: tuple[Any, ...], path: Optional[str] = None) -> Observation:
    """An ``observations`` row as an :class:`Observation` (``path`` overrides the row's); the
    ``summary`` and ``detail`` columns may be left out."""
    row_path, line, name, shape_json, dtype, device, requires_grad, grad_fn = row[:8]
    path = row_path if path is None else path
    hits, shape_varied, process, col, last_run_id = row[8:13]
    summary, detail = (row[13], row[14]) if len(row) >= 15 else (None, None)
    try:
        shape = tuple(int(d) for d in json.loads(shape_json))
    except (TypeError, ValueError):
        shape = ()
    return Observation(
        path=path,
        line=int(line),
        name=name,
        shape=shape,
        dtype=dtype,
        device=device,
        requires_grad=bool(requires_grad),
        grad_fn=grad_fn,
        hits=int(hits),
        shape_varied=bool(shape_varied),
        process=process,
        col=None if col is None else int(col),
        last_run_id=None if last_run_id is None else int(last_run_id),
        summary=summary,
        detail=detail,
    )


def finding_from_row(row: tuple[Any, ...]) -> Finding:
    """A ``findings`` row (rule, path, line, message, tensors_json, process) as the finding the
    writer stored; :class:`MalformedFinding` for a row it did not write."""
    rule, path, line, message, tensors_json, process = row
    try:
        tensors = json.loads(tensors_json)
    except (TypeError, ValueError) as error:
        raise MalformedFinding(f"the tensors of a finding are not JSON: {error}") from error
    record = {"rule": rule, "path": path, "line": line, "message": message, "tensors": tensors}
    return Finding.from_json(dict(record, process=process_of_label(str(process))))


def _run(row: tuple[Any, ...]) -> RunInfo:
    run_id, started, ended, argv_json, cwd, exit_json, command = row
    try:
        argv = [str(a) for a in json.loads(argv_json)]
    except (TypeError, ValueError):
        argv = []
    return RunInfo(
        run_id=int(run_id),
        started=float(started),
        ended=None if ended is None else float(ended),
        argv=argv,
        cwd=cwd,
        exit_json=exit_json,
        command=command,
    )


class TraceReader:
    """A read-only view of one trace store file; safe to share between threads.

    Raises :class:`TraceStoreError` (from the constructor and from any method) while the file
    is corrupt, not a trace store, or written by a newer tensor-dap.
    """

    def __init__(self, db_path: Union[str, os.PathLike[str]]) -> None:
        self.path = pathlib.Path(db_path)
        self._lock = threading.RLock()
        self._conn: Optional[sqlite3.Connection] = None
        self._identity: Optional[tuple[int, int]] = None
        self._ready = False
        with self._lock:
            self._refresh()

    @property
    def available(self) -> bool:
        """Whether the file exists and holds a trace store (possibly still without rows)."""
        with self._lock:
            return self._refresh()

    def observations_for(self, path: str) -> list[Observation]:
        """Everything observed in ``path`` (absolute, as the writer stored it), ordered by line,
        name and process."""
        rows = self.select_observations(
            _OBSERVATION_COLUMNS, "WHERE path = ? ORDER BY line, name, process", (path,)
        )
        return [observation_from_row(row) for row in rows]

    def select_observations(
        self, columns: str, where: str, params: tuple[Any, ...]
    ) -> list[tuple[Any, ...]]:
        """``SELECT columns FROM observations where``; in a version 2 store (before a writer
        migrated it) the columns it lacks are selected as NULL."""

        def query(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            sql = f"SELECT {columns} FROM observations {where}"
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.OperationalError as error:
                if "no such column" not in str(error):
                    raise
            old = ", ".join(VERSION_2_COLUMNS.get(c.strip(), c) for c in columns.split(","))
            return conn.execute(f"SELECT {old} FROM observations {where}", params).fetchall()

        empty: list[tuple[Any, ...]] = []
        return self._read(query, empty)

    def findings_for(
        self, path: Optional[str] = None, run_id: Optional[int] = None
    ) -> list[Finding]:
        """Findings of ``run_id`` (default: the latest run), in ``path`` or in all files; a row
        that is not a finding is left out (and logged)."""

        def query(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            wanted = run_id
            if wanted is None:
                wanted = conn.execute("SELECT MAX(run_id) FROM runs").fetchone()[0]
                if wanted is None:
                    return []
            sql = (
                "SELECT rule, path, line, message, tensors_json, process "
                "FROM findings WHERE run_id = ?"
            )
            params: tuple[Any, ...] = (int(wanted),)
            if path is not None:
                sql += " AND path = ?"
                params += (path,)
            sql += " ORDER BY path, line, rule, process, finding_id"
            return conn.execute(sql, params).fetchall()

        found: list[Finding] = []
        empty: list[tuple[Any, ...]] = []
        for row in self._read(query, empty):
            try:
                found.append(finding_from_row(row))
            except MalformedFinding as error:
                log.warning("tensor-dap: skipped a finding in %s: %s", self.path, error)
        return found

    def latest_run(self) -> Optional[RunInfo]:
        """The most recently begun run, finished or not; None before any run."""
        rows = self._query(f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY run_id DESC LIMIT 1", ())
        return _run(rows[0]) if rows else None

    def simulated_runs(self) -> dict[int, str]:
        """The kept runs whose devices were simulated (``--simulate``): run id -> kind."""
        rows = self._query(
            "SELECT run_id, command FROM runs WHERE command LIKE ?", (f"% {SIMULATE_FLAG} %",)
        )
        kinds = {int(run_id): simulated_kind(str(command)) for run_id, command in rows}
        return {run_id: kind for run_id, kind in kinds.items() if kind}

    def source_digest(self, path: str) -> Optional[str]:
        """The digest of ``path``'s text as the latest run that recorded it saw it."""
        rows = self._query("SELECT digest FROM sources WHERE path = ?", (path,))
        return rows[0][0] if rows else None

    def source_text(self, path: str) -> Optional[str]:
        """``path``'s text as the latest run that recorded it saw it; None when not recorded
        (too long, or a store written before texts were kept)."""

        def query(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            try:
                return conn.execute("SELECT text FROM sources WHERE path = ?", (path,)).fetchall()
            except sqlite3.OperationalError as error:
                if "no such column" in str(error):  # a version 1 store, not migrated yet
                    return []
                raise

        empty: list[tuple[Any, ...]] = []
        rows = self._read(query, empty)
        return rows[0][0] if rows else None

    def data_version(self) -> int:
        """A number that changes with every writer commit (0 while there is no store).

        Cheap enough to poll; compare for inequality only, it is not a count of commits.
        """
        rows = self._query("SELECT value FROM meta WHERE key = ?", (schema.COUNTER_KEY,))
        try:
            return int(rows[0][0]) if rows else 0
        except (TypeError, ValueError):
            return 0

    def close(self) -> None:
        """Close the connection; a later call opens it again."""
        with self._lock:
            self._drop()

    def __enter__(self) -> TraceReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------

    def _query(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self._read(lambda conn: conn.execute(sql, params).fetchall(), [])

    def _read(self, query: Callable[[sqlite3.Connection], T], empty: T) -> T:
        with self._lock:
            if not self._refresh():
                return empty
            conn = self._conn
            assert conn is not None
            return retrying(self.path, lambda: query(conn))

    def _refresh(self) -> bool:
        """Follow the file: open it once it exists, reopen it when it was replaced, and check
        that it is a trace store we can read. True when there is a store to query."""
        try:
            stat = os.stat(self.path)
        except OSError:
            self._drop()
            return False
        identity = (stat.st_dev, stat.st_ino)
        if self._conn is not None and identity != self._identity:
            self._drop()
        if self._conn is None:
            self._conn = open_reader(self.path)
            self._identity = identity
        if not self._ready:
            conn = self._conn
            try:
                version = retrying(self.path, lambda: schema.stored_version(conn, str(self.path)))
            except TraceStoreError:
                self._drop()
                raise
            # None: an empty database a writer has not filled in yet.
            self._ready = version is not None
        return self._ready

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        self._identity = None
        self._ready = False
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
