"""Write what a run observed into the trace store while it runs, and once more at the end.

A daemon thread flushes every second so an editor sees hints and findings appear during a long
run. Each flush sends only what changed (hit counts are deltas: the store adds them up). A trace
store that cannot be written (read-only folder, corrupt file) costs a warning, never the run.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from typing import Any, Optional, Protocol

from tensor_dap.agent.threads import start_tool_thread
from tensor_dap.findings import Finding
from tensor_dap.tracedb import (
    Observation,
    TraceStoreError,
    TraceWriter,
    source_text,
    text_digest,
)

log = logging.getLogger("tensor_dap.tracedb")


class Recorder(Protocol):
    """What a session writes: the engine's :class:`~tensor_dap.agent.recorder.TraceRecorder`
    under ``check``, the line tracer's ``LineStore`` under ``trace``."""

    def paths(self) -> set[str]: ...

    def observations(self, line_hits: Any = None) -> list[Observation]: ...


class TraceSession:
    def __init__(
        self,
        db_path: str,
        recorder: Recorder,
        line_hits: Any,
        command: str,
        argv: list[str],
        cwd: str,
        interval: float = 1.0,
        run_id: Optional[int] = None,
    ) -> None:
        self.db_path = db_path
        self.recorder = recorder
        self.line_hits = line_hits
        self.command, self.argv, self.cwd = command, argv, cwd
        self.interval = interval
        #: given: join that run, begun by the parent process (a torchrun rank, a DataLoader
        #: worker), and leave its end to the parent
        self.run_id: Optional[int] = run_id
        self._joined = run_id is not None
        self.error: Optional[str] = None
        self._writer: Optional[TraceWriter] = None
        self._flushed_hits: dict[tuple[str, int, str, str], int] = {}
        self._flushed_findings = 0
        self._digests: dict[str, str] = {}
        self._findings: list[Finding] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self, findings: list[Finding]) -> None:
        """Begin a run in the store; ``findings`` is the live list the engine appends to."""
        self._findings = findings
        try:
            self._writer = TraceWriter(self.db_path)
            if not self._joined:
                self.run_id = self._writer.begin_run(self.command, self.argv, self.cwd)
        except (TraceStoreError, sqlite3.Error, OSError) as error:
            self._fail(error)
            return
        self._thread = start_tool_thread(self._loop, "tensor-dap-trace")

    def finish(self, exit_info: dict[str, Any]) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.flush()
        if self._writer is not None and self.run_id is not None:
            try:
                if not self._joined:
                    self._writer.end_run(self.run_id, exit_info)
                self._writer.close()
            except (TraceStoreError, sqlite3.Error, OSError) as error:
                self._fail(error)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.flush()

    def flush(self) -> None:
        if self._writer is None or self.run_id is None:
            return
        with self._lock:
            try:
                self._flush()
            except (TraceStoreError, sqlite3.Error, OSError) as error:
                self._fail(error)

    def _flush(self) -> None:
        assert self._writer is not None and self.run_id is not None
        for path in self.recorder.paths():
            if path not in self._digests:
                try:
                    text = source_text(path)
                except OSError:
                    continue
                self._digests[path] = text_digest(text)
                self._writer.record_source(path, self._digests[path], self.run_id, text)
        rows = []
        for row in self.recorder.observations(self.line_hits):
            key = (row.path, row.line, row.name, row.process)
            total = row.hits
            row.hits = total - self._flushed_hits.get(key, 0)
            if row.hits > 0:
                rows.append(row)
                self._flushed_hits[key] = total
        if rows:
            self._writer.add_observations(self.run_id, rows)
        new = self._findings[self._flushed_findings :]
        if new:
            self._writer.add_findings(self.run_id, new)
            self._flushed_findings += len(new)

    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = f"{type(error).__name__}: {error}"
            log.warning("tensor-dap: the trace store %s cannot be written: %s", self.db_path, error)
        self._writer = None
