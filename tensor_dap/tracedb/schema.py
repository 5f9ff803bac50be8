"""The trace store's tables and the version that says how to read them.

The schema version lives in the ``meta`` table, not in ``PRAGMA user_version``, so that a reader
can tell "an empty file a writer is about to fill" (no tables), "a store of ours" (``meta`` with a
known ``schema_version``) and "someone else's database or a store written by a newer tensor-dap"
(anything else) apart, and refuse the last two with a message instead of misreading them.

Size: observations are keyed by (path, line, name, process), so the store grows with the code,
not with the number of steps; findings and runs are pruned to the last few runs by the writer.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Optional

from .errors import TraceStoreError

SCHEMA_VERSION = 3
"""Bump when a table changes; add a migration from the older versions to :func:`initialize`."""

MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE sources ADD COLUMN text TEXT",),
    2: (
        "ALTER TABLE observations ADD COLUMN summary TEXT",
        "ALTER TABLE observations ADD COLUMN detail TEXT",
    ),
}
"""Version -> the statements that bring a store of that version to the next one. Version 2
keeps each observed file's text, so that the language server can match lines of an edited
file to the lines the run saw; version 3 describes values other than tensors (modules, lists
of tensors) in ``observations.summary`` and ``detail``."""

VERSION_KEY = "schema_version"
COUNTER_KEY = "change_counter"
"""A ``meta`` row every writer commit bumps; readers poll it to know they must refresh."""

DDL: tuple[str, ...] = (
    """
    CREATE TABLE IF NOT EXISTS meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS runs (
        run_id    INTEGER PRIMARY KEY AUTOINCREMENT,
        started   REAL NOT NULL,
        ended     REAL,
        command   TEXT NOT NULL,
        argv_json TEXT NOT NULL,
        cwd       TEXT NOT NULL,
        exit_json TEXT
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS observations (
        path          TEXT NOT NULL,
        line          INTEGER NOT NULL,
        name          TEXT NOT NULL,
        process       TEXT NOT NULL,
        col           INTEGER,
        shape_json    TEXT NOT NULL,
        dtype         TEXT NOT NULL,
        device        TEXT NOT NULL,
        requires_grad INTEGER NOT NULL,
        grad_fn       TEXT,
        hits          INTEGER NOT NULL,
        shape_varied  INTEGER NOT NULL,
        last_run_id   INTEGER,
        updated       REAL NOT NULL,
        summary       TEXT,
        detail        TEXT,
        PRIMARY KEY (path, line, name, process)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS findings (
        finding_id   INTEGER PRIMARY KEY,
        run_id       INTEGER NOT NULL,
        rule         TEXT NOT NULL,
        path         TEXT NOT NULL,
        line         INTEGER NOT NULL,
        message      TEXT NOT NULL,
        tensors_json TEXT NOT NULL,
        process      TEXT NOT NULL,
        UNIQUE (run_id, rule, path, line, process, message)
    )
    """,
    "CREATE INDEX IF NOT EXISTS findings_by_path ON findings (path, run_id)",
    """
    CREATE TABLE IF NOT EXISTS sources (
        path     TEXT PRIMARY KEY,
        digest   TEXT NOT NULL,
        run_id   INTEGER,
        recorded REAL NOT NULL,
        text     TEXT
    )
    """,
)


def stored_version(conn: sqlite3.Connection, path: str) -> Optional[int]:
    """The store's schema version, or None for an empty database (no tables yet).

    Raises :class:`TraceStoreError` for a database that is not a trace store, or whose version
    this tensor-dap cannot read. sqlite3 errors (corrupt file, lock) propagate to the caller.
    """
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables:
        return None
    if "meta" not in tables:
        raise TraceStoreError(
            f"{path} is an SQLite database but not a tensor-dap trace store "
            f"(no 'meta' table); point TENSOR_DAP_TRACE elsewhere or delete the file"
        )
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (VERSION_KEY,)).fetchone()
    try:
        version = int(row[0]) if row is not None else None
    except (TypeError, ValueError):
        version = None
    if version is None:
        found = "none" if row is None else repr(row[0])
        raise TraceStoreError(
            f"trace store {path} has an unknown schema version ({found}); delete the file and "
            f"run again"
        )
    if version > SCHEMA_VERSION:
        raise TraceStoreError(
            f"trace store {path} was written by a newer tensor-dap (schema version {version}, "
            f"this one reads {SCHEMA_VERSION}); upgrade tensor-dap or delete the file"
        )
    if version != SCHEMA_VERSION and version not in MIGRATIONS:
        raise TraceStoreError(
            f"trace store {path} has schema version {version}, which this tensor-dap cannot "
            f"read (it reads {SCHEMA_VERSION}); delete the file and run again"
        )
    return version


def initialize(conn: sqlite3.Connection, path: str) -> None:
    """Create the tables of an empty database, or check an existing store's version.

    Call inside a write transaction (``BEGIN IMMEDIATE``) so that two processes creating the
    store at once do not both try. The change counter starts at the current time in microseconds,
    so a store deleted and created again does not repeat the values a reader saw before.
    """
    version = stored_version(conn, path)
    if version is not None:
        _migrate(conn, version)
        return
    for statement in DDL:
        conn.execute(statement)
    conn.executemany(
        "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
        [(VERSION_KEY, str(SCHEMA_VERSION)), (COUNTER_KEY, str(time.time_ns() // 1000))],
    )


def _migrate(conn: sqlite3.Connection, version: int) -> None:
    """Bring a store of an older ``version`` up to :data:`SCHEMA_VERSION`, in the caller's
    transaction (readers of the old version keep reading: only columns are added)."""
    while version < SCHEMA_VERSION:
        for statement in MIGRATIONS[version]:
            conn.execute(statement)
        version += 1
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", (str(version), VERSION_KEY))


def bump_counter(conn: sqlite3.Connection) -> None:
    """Advance the change counter; part of every writer transaction."""
    conn.execute(
        "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = ?",
        (COUNTER_KEY,),
    )
