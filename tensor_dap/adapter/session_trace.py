"""The trace-store run of a launched debug session, begun and ended by the adapter.

Every launch writes the trace store as ``tensor-dap check`` does (the language server shows its
shapes and findings while the session runs; :mod:`tensor_dap.agent.live_trace` is the
debuggee's side). The adapter begins the run — in the store of the debuggee's working
directory, or ``$TENSOR_DAP_TRACE`` of its environment — and passes its id to the debuggee,
whose processes all join it. The adapter ends it because it outlives the debuggee: when the user
stops the session, debugpy kills the debuggee, which can say nothing; the run is then recorded as
stopped by the debugger (``exit_json``), never left looking as if it were still going.

``"traceStore": false`` in the launch configuration writes nothing (and installs nothing in a
debuggee with no tensor breakpoint enabled). A store that cannot be written costs one line in
the debug console, never the session.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Mapping
from typing import Any, Callable, Optional

from tensor_dap.runner import ExitInfo
from tensor_dap.tracedb import TraceStoreError, TraceWriter, default_trace_path, run_command

#: the launch attribute that turns the store off
OPT_OUT = "traceStore"
#: ``runs.command`` of a debug session
COMMAND = "debug"

Message = dict[str, Any]


class SessionTrace:
    """The run of one launch; :meth:`begin` at ``launch``, :meth:`end` once, however it ends."""

    def __init__(self, tell_client: Callable[[str], None]) -> None:
        self._tell_client = tell_client
        self._writer: Optional[TraceWriter] = None
        self.run_id: Optional[int] = None
        self.path: Optional[str] = None
        self._stopping = False
        self._lock = threading.Lock()

    def begin(
        self, arguments: dict[str, Any], argv: list[str], simulate: Optional[str] = None
    ) -> list[str]:
        """Begin the run of the launch whose (rewritten) ``arguments`` start ``argv`` (on the
        ``simulate``d device kind, if any); the debuggee's arguments that make it join (none
        when the store is off or unwritable)."""
        if arguments.pop(OPT_OUT, True) is False:
            return []
        cwd = os.path.abspath(str(arguments.get("cwd") or os.getcwd()))
        path = str(default_trace_path(cwd, _environment(arguments.get("env"))))
        try:
            writer = TraceWriter(path)
            run_id = writer.begin_run(run_command(COMMAND, simulate), argv, cwd)
        except (TraceStoreError, sqlite3.Error, OSError) as error:
            self._tell_client(f"tensor-dap: the trace store {path} cannot be written: {error}")
            return []
        with self._lock:
            self._writer, self.run_id, self.path = writer, run_id, path
        return ["--trace", path, "--trace-run", str(run_id)]

    def stopping(self, _message: Message) -> None:
        """``disconnect`` / ``terminate``: a debuggee that ends from now on was stopped."""
        self._stopping = True

    def exited(self, message: Message) -> None:
        """debugpy's ``exited`` event: the debuggee ended with this exit code."""
        code = (message.get("body") or {}).get("exitCode")
        if self._stopping:
            self.end(_stopped())
        elif isinstance(code, int):
            self.end(ExitInfo("ok" if code == 0 else "exit", code))
        else:
            self.end(_stopped())

    def end(self, exit_info: Optional[ExitInfo] = None) -> None:
        """Record how the run ended (default: with the session) and close the store; once."""
        with self._lock:
            writer, run_id, self._writer = self._writer, self.run_id, None
        if writer is None or run_id is None:
            return
        info = exit_info or _stopped()
        try:
            writer.end_run(run_id, info.to_json())
        except (TraceStoreError, sqlite3.Error, OSError):
            pass  # the rows are written; only the run's end is missing
        finally:
            writer.close()


def _stopped() -> ExitInfo:
    return ExitInfo("signal", 137, "stopped by the debugger")


def _environment(launch_env: Any) -> Mapping[str, str]:
    """The debuggee's environment as far as the store's location goes: the adapter's, with the
    launch's ``env`` over it (``null`` removes a variable, as in VS Code's launch.json)."""
    env = dict(os.environ)
    if isinstance(launch_env, dict):
        for key, value in launch_env.items():
            if value is None:
                env.pop(str(key), None)
            else:
                env[str(key)] = str(value)
    return env
