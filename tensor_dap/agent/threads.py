"""tensor-dap's own threads in the debuggee, kept out of the user's sight.

The agent's channel and the trace flusher run beside the program. Marked as debugger threads
(pydevd's ``is_pydev_daemon_thread`` / ``pydev_do_not_trace``), debugpy neither lists them in
CALL STACK ("tensor-dap-agent: PAUSED") nor traces or suspends them, and the watch engine does
not push its mode in them.
"""

from __future__ import annotations

import threading
from typing import Any, Callable


def start_tool_thread(
    target: Callable[..., Any], name: str, args: tuple[Any, ...] = ()
) -> threading.Thread:
    """Start ``target(*args)`` in a daemon thread the debugger and the engine leave alone."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    thread.is_pydev_daemon_thread = True  # type: ignore[attr-defined]
    thread.pydev_do_not_trace = True  # type: ignore[attr-defined]
    thread.start()
    return thread


def is_tool_thread(thread: threading.Thread) -> bool:
    """A thread started by :func:`start_tool_thread`, or one of the debugger's own."""
    return bool(getattr(thread, "is_pydev_daemon_thread", False))
