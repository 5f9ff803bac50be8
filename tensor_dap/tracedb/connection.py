"""Opening SQLite connections to the trace store, and surviving other processes using it.

Several processes write one store at once (torchrun ranks, DataLoader workers) while the language
server reads it. WAL mode lets readers go on during a write; writers take turns, each waiting up
to ``busy_timeout`` and, should SQLite still answer "database is locked", retrying the whole short
transaction. Every other sqlite3 error becomes a :class:`TraceStoreError` that names the file.
"""

from __future__ import annotations

import os
import pathlib
import random
import sqlite3
import time
from typing import Callable, TypeVar, Union

from .errors import TraceStoreError

BUSY_TIMEOUT_S = 10.0
"""How long SQLite itself waits for another process's lock before answering "locked"."""

RETRY_DEADLINE_S = 30.0
"""How long a transaction is retried, in all, while the store stays locked."""

T = TypeVar("T")
PathLike = Union[str, "os.PathLike[str]"]


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` means another connection holds a lock (worth retrying)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def translate(exc: BaseException, path: PathLike) -> TraceStoreError:
    """A :class:`TraceStoreError` with a message a user can act on, for a sqlite3 error."""
    if isinstance(exc, TraceStoreError):
        return exc
    text = str(exc)
    lower = text.lower()
    if is_busy(exc):
        return TraceStoreError(
            f"trace store {path} stayed locked by another process for over "
            f"{RETRY_DEADLINE_S:.0f} s ({text})"
        )
    if any(word in lower for word in ("not a database", "malformed", "corrupt", "encrypted")):
        return TraceStoreError(
            f"trace store {path} is corrupt or not an SQLite database ({text}); delete it and "
            f"run again"
        )
    if "unable to open" in lower:
        return TraceStoreError(f"cannot open trace store {path} ({text})")
    return TraceStoreError(f"trace store {path}: {text}")


def retrying(path: PathLike, attempt: Callable[[], T]) -> T:
    """Run ``attempt`` until it does not fail with a lock, for up to :data:`RETRY_DEADLINE_S`.

    ``attempt`` must be repeatable: a whole transaction that rolls back when it fails.
    """
    deadline = time.monotonic() + RETRY_DEADLINE_S
    delay = 0.005
    while True:
        try:
            return attempt()
        except sqlite3.Error as exc:
            if is_busy(exc) and time.monotonic() < deadline:
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.25)
                continue
            raise translate(exc, path) from exc


def _configure(conn: sqlite3.Connection) -> None:
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")


def open_writer(path: PathLike) -> sqlite3.Connection:
    """A read-write connection in WAL mode; the file is created when missing.

    Autocommit (``isolation_level=None``): callers issue ``BEGIN IMMEDIATE`` / ``COMMIT``
    themselves, so each transaction takes the write lock up front and stays short.
    """

    def attempt() -> sqlite3.Connection:
        conn = sqlite3.connect(
            os.fspath(path),
            timeout=BUSY_TIMEOUT_S,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            _configure(conn)
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise TraceStoreError(
                    f"trace store {path} cannot use WAL mode (journal mode is {mode!r}); "
                    f"put it on a local file system with TENSOR_DAP_TRACE"
                )
            conn.execute("PRAGMA synchronous = NORMAL")
        except BaseException:
            conn.close()
            raise
        return conn

    return retrying(path, attempt)


def open_reader(path: PathLike) -> sqlite3.Connection:
    """A read-only connection (``mode=ro`` URI); it never creates or changes the file."""
    uri = pathlib.Path(path).absolute().as_uri() + "?mode=ro"

    def attempt() -> sqlite3.Connection:
        conn = sqlite3.connect(
            uri,
            uri=True,
            timeout=BUSY_TIMEOUT_S,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            _configure(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    return retrying(path, attempt)
