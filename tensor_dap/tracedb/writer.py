"""Writing what a run observed into the trace store, from any number of processes at once.

The agent calls this from the user's process and from its children (torchrun ranks, DataLoader
workers), all on one file. Each call is one short ``BEGIN IMMEDIATE`` transaction, retried while
another process holds the lock, so no row is lost and the file stays consistent. Observations are
upserted per (path, line, name, process): the store grows with the code, not with the steps.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Optional, TypeVar, Union

from tensor_dap.findings import Finding

from . import schema
from .connection import open_writer, retrying
from .errors import TraceStoreError
from .location import TRACE_DIR
from .records import Observation, process_label

MAX_RUNS_KEPT = 20
"""Runs (and their findings) kept in the store; older ones are pruned when a run begins."""

MAX_FINDINGS_PER_RUN = 1000
"""Findings stored per run at most, so a rule firing with a new message every step stays bounded."""

MAX_SOURCE_CHARS = 2_000_000
"""A source file longer than this is recorded by digest only (its lines are not matched)."""

T = TypeVar("T")

# Connections inherited across fork() must be neither used nor closed in the child (closing one
# could checkpoint or delete the parent's WAL). They are kept here, so that garbage collection
# does not close them either.
_inherited: list[sqlite3.Connection] = []


def _shape_json(shape: tuple[int, ...]) -> str:
    return json.dumps([int(d) for d in shape], separators=(",", ":"))


class TraceWriter:
    """A writer of one trace store file; create one per process (it is safe across threads).

    Opening creates the file and its folder when missing, and raises :class:`TraceStoreError`
    for a file that is corrupt, not a trace store, or written by a newer tensor-dap.
    """

    def __init__(self, db_path: Union[str, os.PathLike[str]]) -> None:
        self.path = pathlib.Path(db_path)
        self._lock = threading.Lock()
        self._conn: Optional[sqlite3.Connection] = None
        self._pid = os.getpid()
        self._closed = False
        self._make_parent()
        with self._lock:
            self._connection()

    # -- public API ---------------------------------------------------------------------------

    def begin_run(self, command: str, argv: list[str], cwd: str) -> int:
        """Record the start of a run and return its id; prunes runs beyond :data:`MAX_RUNS_KEPT`."""
        argv_json = json.dumps([str(a) for a in argv])
        started = time.time()

        def body(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(
                "INSERT INTO runs (started, command, argv_json, cwd) VALUES (?, ?, ?, ?)",
                (started, str(command), argv_json, str(cwd)),
            )
            run_id = int(cursor.lastrowid or 0)
            oldest_kept = conn.execute(
                "SELECT run_id FROM runs ORDER BY run_id DESC LIMIT 1 OFFSET ?",
                (MAX_RUNS_KEPT - 1,),
            ).fetchone()
            if oldest_kept is not None:
                conn.execute("DELETE FROM findings WHERE run_id < ?", (oldest_kept[0],))
                conn.execute("DELETE FROM runs WHERE run_id < ?", (oldest_kept[0],))
            return run_id

        return self._write(body)

    def add_observations(self, run_id: int, observations: Iterable[Observation]) -> None:
        """Upsert observations: the newest state replaces the stored one and ``hits`` add up.

        ``shape_varied`` becomes (and stays) true once a key is seen with a shape other than
        the stored one, within this batch or across runs.
        """
        merged: dict[tuple[str, int, str, str], list[Any]] = {}
        for obs in observations:
            shape = _shape_json(obs.shape)
            entry = merged.get(obs.key)
            if entry is None:
                merged[obs.key] = [obs, shape, int(obs.hits), bool(obs.shape_varied), obs.col]
                continue
            entry[3] = entry[3] or bool(obs.shape_varied) or entry[1] != shape
            entry[0], entry[1], entry[2] = obs, shape, entry[2] + int(obs.hits)
            if obs.col is not None:
                entry[4] = obs.col
        if not merged:
            return
        now = time.time()
        rows = []
        for (path, line, name, process), (obs, shape, hits, varied, col) in merged.items():
            state = (
                shape,
                str(obs.dtype),
                str(obs.device),
                int(bool(obs.requires_grad)),
                obs.grad_fn if obs.grad_fn is None else str(obs.grad_fn),
                obs.summary if obs.summary is None else str(obs.summary),
                obs.detail if obs.detail is None else str(obs.detail),
            )
            key = (str(path), int(line), str(name), str(process))
            rows.append((key, state, hits, int(varied), None if col is None else int(col)))

        def body(conn: sqlite3.Connection) -> None:
            for key, state, hits, varied, col in rows:
                updated = conn.execute(
                    """
                    UPDATE observations SET
                        shape_varied = CASE
                            WHEN shape_varied <> 0 OR ? <> 0 OR shape_json <> ? THEN 1 ELSE 0
                        END,
                        col = COALESCE(?, col),
                        shape_json = ?, dtype = ?, device = ?, requires_grad = ?, grad_fn = ?,
                        summary = ?, detail = ?, hits = hits + ?, last_run_id = ?, updated = ?
                    WHERE path = ? AND line = ? AND name = ? AND process = ?
                    """,
                    (varied, state[0], col, *state, hits, run_id, now, *key),
                ).rowcount
                if updated == 0:
                    conn.execute(
                        """
                        INSERT INTO observations (
                            path, line, name, process, col, shape_json, dtype, device,
                            requires_grad, grad_fn, summary, detail, hits, shape_varied,
                            last_run_id, updated
                        ) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                        (*key, col, *state, hits, varied, run_id, now),
                    )

        self._write(body)

    def add_findings(self, run_id: int, findings: Iterable[Finding]) -> None:
        """Store findings of a run: the tensors as the JSON list ``Finding.to_json`` gives, the
        process as its label (:func:`~.records.process_label`). The same finding reported twice
        in a run is stored once.
        """
        rows = [
            (
                int(run_id),
                finding.rule,
                finding.path,
                int(finding.line),
                finding.message,
                json.dumps(finding.to_json()["tensors"], default=str),
                process_label(finding.process),
            )
            for finding in findings
        ]
        if not rows:
            return

        def body(conn: sqlite3.Connection) -> None:
            stored = conn.execute(
                "SELECT COUNT(*) FROM findings WHERE run_id = ?", (int(run_id),)
            ).fetchone()[0]
            for row in rows:
                if stored >= MAX_FINDINGS_PER_RUN:
                    break
                stored += conn.execute(
                    """
                    INSERT OR IGNORE INTO findings
                        (run_id, rule, path, line, message, tensors_json, process)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                    row,
                ).rowcount

        self._write(body)

    def record_source(
        self, path: str, digest: str, run_id: Optional[int] = None, text: Optional[str] = None
    ) -> None:
        """Remember the digest of ``path``'s text as this run saw it (see ``digest.text_digest``),
        and the text itself when given and at most :data:`MAX_SOURCE_CHARS` long (the language
        server matches an edited file's lines to it).

        When the digest differs from the stored one and ``run_id`` is given, the file changed
        since earlier runs: their observations of it point at old lines and are dropped.
        """

        kept = text if text is not None and len(text) <= MAX_SOURCE_CHARS else None

        def body(conn: sqlite3.Connection) -> None:
            old = conn.execute("SELECT digest FROM sources WHERE path = ?", (path,)).fetchone()
            conn.execute(
                "INSERT OR REPLACE INTO sources (path, digest, run_id, recorded, text) "
                "VALUES (?, ?, ?, ?, ?)",
                (str(path), str(digest), run_id, time.time(), kept),
            )
            if old is not None and old[0] != digest and run_id is not None:
                conn.execute(
                    "DELETE FROM observations WHERE path = ? AND last_run_id < ?",
                    (str(path), int(run_id)),
                )

        self._write(body)

    def end_run(self, run_id: int, exit_info: Optional[Mapping[str, Any]]) -> None:
        """Record the end of a run and how it ended (stored as JSON)."""
        exit_json = None if exit_info is None else json.dumps(dict(exit_info), default=str)
        ended = time.time()
        self._write(
            lambda conn: conn.execute(
                "UPDATE runs SET ended = ?, exit_json = ? WHERE run_id = ?",
                (ended, exit_json, int(run_id)),
            )
        )

    def close(self) -> None:
        """Close the connection (the last one out checkpoints the WAL). Idempotent."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None and self._pid == os.getpid():
                with contextlib.suppress(sqlite3.Error):
                    conn.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------

    def _make_parent(self) -> None:
        parent = self.path.parent
        try:
            existed = parent.is_dir()
            parent.mkdir(parents=True, exist_ok=True)
            if not existed and parent.name == TRACE_DIR:
                # Like .pytest_cache: keep the folder out of the user's commits.
                (parent / ".gitignore").write_text("# created by tensor-dap\n*\n")
        except OSError as exc:
            raise TraceStoreError(
                f"cannot create the folder of trace store {self.path}: {exc}"
            ) from exc

    def _connection(self) -> sqlite3.Connection:
        """The connection of this process, opened (and the schema checked) on first use."""
        if self._closed:
            raise TraceStoreError(f"trace store {self.path} was closed")
        if self._conn is not None and self._pid != os.getpid():
            _inherited.append(self._conn)
            self._conn = None
        if self._conn is None:
            conn = open_writer(self.path)
            try:
                self._transaction(conn, lambda c: schema.initialize(c, str(self.path)))
            except BaseException:
                conn.close()
                raise
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def _write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            return self._transaction(self._connection(), body)

    def _transaction(self, conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` in one write transaction that also bumps the change counter; retried
        as a whole while another process holds the lock."""

        def attempt() -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = body(conn)
                schema.bump_counter(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise
            return result

        return retrying(self.path, attempt)
