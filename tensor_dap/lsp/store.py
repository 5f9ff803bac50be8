"""The language server's view of the trace store: lazy, cached, and never fatal.

:class:`TraceStore` opens a :class:`~tensor_dap.trace.TraceReader` on first use, caches what it
read per file, and drops the cache when the store's ``data_version()`` changes (checked on each
read and by the server's poll). A missing, empty, locked, truncated or corrupt store answers empty
results; what is wrong is queued once as a message for ``window/logMessage`` (again only after the
store recovered and broke anew). Methods are thread-safe: the server calls them off its event loop.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from lsprotocol import types

from tensor_dap.trace import Observation, StoredFinding, TraceReader, TraceStoreError

_NO_VERSION = -1


@dataclass
class FileData:
    """What the store holds about one source file."""

    observations: list[Observation] = field(default_factory=list)
    by_line: dict[int, list[Observation]] = field(default_factory=dict)
    """Observations per 1-based line, in the store's order (name, then process)."""
    findings: list[StoredFinding] = field(default_factory=list)
    """Findings of the latest run that observed the file (else of the latest run)."""
    digest: Optional[str] = None
    """The digest of the file's text as the run saw it; None when not recorded."""
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    """Results the features derived from this data (dropped with it when the store changes)."""


EMPTY = FileData()


class TraceStore:
    """One trace store file, read on demand. ``path`` None: no workspace, nothing to read."""

    def __init__(self, path: Optional[Path] = None) -> None:
        self._lock = threading.RLock()
        self._path = path
        self._reader: Optional[TraceReader] = None
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

    def _open(self) -> Optional[TraceReader]:
        if self._path is None:
            return None
        if self._reader is None:
            try:
                self._reader = TraceReader(self._path)
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
                f"tensor-dap: no trace store at {self._path} yet; run `tensor-dap check SCRIPT` "
                "in the workspace folder to see shapes and findings in the editor.",
            )
            return None
        return self._reader

    def _check_version(self, reader: TraceReader) -> None:
        version = reader.data_version()
        if version != self._version:
            self._cache.clear()
            self._version = version

    def _load(self, reader: TraceReader, path: str) -> FileData:
        observations = reader.observations_for(path)
        if not observations:
            real = os.path.realpath(path)
            if real != path:
                observations = reader.observations_for(real)
                if observations:
                    path = real
        by_line: dict[int, list[Observation]] = defaultdict(list)
        for obs in observations:
            by_line[obs.line].append(obs)
        run_ids = [o.last_run_id for o in observations if o.last_run_id is not None]
        findings = reader.findings_for(path, max(run_ids) if run_ids else None)
        return FileData(observations, dict(by_line), findings, reader.source_digest(path))

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
