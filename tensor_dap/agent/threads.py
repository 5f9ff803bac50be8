"""tensor-dap's own threads in the debuggee, kept out of the user's sight.

The agent's channel and the trace flusher run beside the program. Marked as debugger threads
(pydevd's ``is_pydev_daemon_thread`` / ``pydev_do_not_trace``), debugpy neither lists them in
CALL STACK ("tensor-dap-agent: PAUSED") nor traces or suspends them, and the watch engine does
not push its mode in them (:class:`NewThreads` follows the program's threads, not these).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from types import FrameType
from typing import Any, Callable, Optional

log = logging.getLogger("tensor_dap.engine")


def start_tool_thread(
    target: Callable[..., Any], name: str, args: tuple[Any, ...] = ()
) -> threading.Thread:
    """Start ``target(*args)`` in a daemon thread the debugger and the engine leave alone, and
    the program does not see (:func:`_hidden`)."""
    thread = threading.Thread(target=_hidden, args=(target, args), name=name, daemon=True)
    thread.is_pydev_daemon_thread = True  # type: ignore[attr-defined]
    thread.pydev_do_not_trace = True  # type: ignore[attr-defined]
    _follow_forks()
    thread.start()
    return thread


#: tool threads running now, out of ``threading``'s table (ident -> thread)
_HIDDEN: dict[int, threading.Thread] = {}


def _hidden(target: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """Run ``target(*args)`` out of ``threading.enumerate()`` and ``active_count()``: a program
    that joins every thread but the main one, or waits for ``active_count() == 1`` for its
    workers to finish, would wait for tensor-dap's flusher forever. The thread is put back in
    the table as it ends (``threading`` takes it out itself then) and around a fork (the child's
    ``threading`` marks it as not running there)."""
    ident = threading.get_ident()
    with threading._active_limbo_lock:  # type: ignore[attr-defined]
        thread = threading._active.pop(ident, None)  # type: ignore[attr-defined]
        if thread is not None:
            _HIDDEN[ident] = thread
    try:
        target(*args)
    finally:
        _show(ident)


def _show(ident: int) -> None:
    with threading._active_limbo_lock:  # type: ignore[attr-defined]
        thread = _HIDDEN.pop(ident, None)
        if thread is not None:
            threading._active[ident] = thread  # type: ignore[attr-defined]


#: the tool threads put back in the table for a fork, to hide again in the parent after it
_SHOWN_FOR_FORK: list[int] = []


def _show_all() -> None:
    _SHOWN_FOR_FORK[:] = list(_HIDDEN)
    for ident in _SHOWN_FOR_FORK:
        _show(ident)


def _hide_again() -> None:
    with threading._active_limbo_lock:  # type: ignore[attr-defined]
        for ident in _SHOWN_FOR_FORK:
            thread = threading._active.get(ident)  # type: ignore[attr-defined]
            if thread is not None and is_tool_thread(thread):
                _HIDDEN[ident] = threading._active.pop(ident)  # type: ignore[attr-defined]
    _SHOWN_FOR_FORK.clear()


_forks_followed = False


def _follow_forks() -> None:
    """Around a fork the tool threads are in ``threading``'s table (its handler in the child
    marks the threads that did not survive the fork as ended), and out of it again in the
    parent; the child starts its own."""
    global _forks_followed
    if _forks_followed or not hasattr(os, "register_at_fork"):
        return
    _forks_followed = True
    os.register_at_fork(before=_show_all, after_in_parent=_hide_again)


def is_tool_thread(thread: threading.Thread) -> bool:
    """A thread started by :func:`start_tool_thread`, or one of the debugger's own."""
    return bool(getattr(thread, "is_pydev_daemon_thread", False))


_TOOL_MODULES = ("debugpy", "_pydevd", "pydevd", "_pydev", "tensor_dap")


def is_unwatched(thread: threading.Thread) -> bool:
    """A debugger's or tensor-dap's own thread: never watched (its tensor reads are ours)."""
    if is_tool_thread(thread):
        return True
    target = getattr(thread, "_target", None)
    for owner in (type(thread), target):
        module = getattr(owner, "__module__", None) or ""
        if module.startswith(_TOOL_MODULES):
            return True
    return thread.name.startswith(("pydevd.", "tensor-dap"))


def _thread_profile() -> Any:
    """The profile function ``threading`` gives new threads (``getprofile`` is 3.10+)."""
    getprofile = getattr(threading, "getprofile", None)
    return getprofile() if getprofile is not None else getattr(threading, "_profile_hook", None)


class NewThreads:
    """Calls ``enter()`` in each thread the program starts from now on, until :meth:`stop`.

    ``threading.setprofile`` hands a function to each new thread, called at its first Python
    call: it puts the thread's previous profile function back and calls ``enter`` there — once
    per thread, nothing per call. The debugger's and tensor-dap's own threads are left alone;
    threads started before are not reached (the watch uses this to push its mode, which only
    the thread itself can do).
    """

    def __init__(self, enter: Callable[[], None]) -> None:
        previous = _thread_profile()

        def enter_thread(frame: FrameType, event: str, arg: Any) -> None:
            sys.setprofile(previous)
            try:
                if not is_unwatched(threading.current_thread()):
                    enter()
            except Exception:
                log.exception("tensor-dap: could not watch a new thread")

        self._previous: Any = previous
        self._hook: Optional[Callable[..., Any]] = enter_thread
        threading.setprofile(enter_thread)

    def stop(self) -> None:
        """New threads are left alone again (the profile function before is put back)."""
        if self._hook is not None:
            if _thread_profile() is self._hook:
                threading.setprofile(self._previous)
            self._hook = None
