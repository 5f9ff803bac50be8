"""The trace store of a debug session: what the debuggee's ops produce, written while it runs.

A user who presses F5 gets the same shape, dtype and device hints, hovers and diagnostics as
after ``tensor-dap check``: the debuggee records what its user lines produce (the engine's
:class:`~tensor_dap.agent.recorder.TraceRecorder`) and writes it into the trace store of the
run's working directory (``$TENSOR_DAP_TRACE`` overrides it), in a run its child processes
(``subProcess``, torchrun ranks, DataLoader workers) join, as ``check``'s do.

Launched by the debug adapter, the debuggee joins the run the adapter began (its id comes in
the debuggee's arguments): the adapter ends it however the session ends, also when the debugger
kills the debuggee (:mod:`tensor_dap.adapter.session_trace`). ``tensor-dap run`` begins and ends
its own.

While the program is paused the rows keep coming: the :class:`TraceSession`'s flush thread is a
tool thread (:mod:`tensor_dap.agent.threads`), which debugpy never suspends, so the lines that
ran before a breakpoint reach the store within its interval; a pause on a finding flushes first,
so the finding is in the store when the editor shows the stop. Every write is one SQLite
transaction (WAL): a debuggee killed at any moment leaves a consistent store.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

from tensor_dap.agent.process import process_info
from tensor_dap.agent.recorder import TraceRecorder
from tensor_dap.agent.trace_session import TraceSession
from tensor_dap.tracedb import default_trace_path, process_label

#: how a debug session's runs are named in the store's ``runs.command``
DEBUG_COMMAND = "debug"


def start_live_trace(
    watch: Any,
    db_path: Optional[str] = None,
    run_id: Optional[int] = None,
    command: str = DEBUG_COMMAND,
) -> TraceSession:
    """Record ``watch``'s op outputs and write them to ``db_path`` (default: the store of the
    current directory), in run ``run_id`` (None: begin a run of its own); started, flushing."""
    recorder = TraceRecorder(process=process_label(process_info()))
    watch.recorder = recorder
    path = os.path.abspath(db_path or default_trace_path(os.getcwd()))
    session = TraceSession(
        path, recorder, watch.line_hits, command, list(sys.argv), os.getcwd(), run_id=run_id
    )
    session.start(watch.findings)

    def flush_before_pause(_finding: Any, _frame: Any) -> None:
        session.flush()

    watch.sinks.insert(0, flush_before_pause)
    return session
