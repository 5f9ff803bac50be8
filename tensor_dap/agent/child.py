"""The agent in a child process of a watched run (a torchrun rank, a DataLoader worker).

Armed at start-up by the bootstrap ``sitecustomize`` (see :mod:`tensor_dap.agent.spread`), it
waits for the program to import torch: an import hook runs torch's own import, then installs a
:class:`~tensor_dap.agent.engine.Watch` (on the main thread, where programs import torch; the
watch follows the threads started after it), so a process that never uses torch pays nothing.
A forked child (a DataLoader worker with the ``fork`` start method) inherits its parent's
watch, already active; :func:`follow_forks` makes such a child report as itself.

Where findings go follows the :class:`~tensor_dap.agent.spread.ChildConfig`: printed on stderr
and appended to the run folder's findings log (``tensor-dap check``), and/or a debugger stop
(launched by the debug adapter, whose agent channel the child reaches through
``TENSOR_DAP_AGENT``). Observations go to the parent's trace-store run, labelled with the
process (``rank 1``, ``worker 0``). Nothing here raises into the program.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.util
import logging
import os
import sys
import threading
from types import ModuleType
from typing import Any, Optional

from tensor_dap.agent.spread import ChildConfig
from tensor_dap.agent.threads import start_tool_thread

log = logging.getLogger("tensor_dap.agent")

#: the agent of this process, once there is one
_current: Optional[ProcessAgent] = None
#: what a forked child inherited and must neither use nor close (an SQLite connection closed
#: in a child could checkpoint the parent's WAL): kept alive here
_inherited: list[Any] = []
_forks_followed = False


def arm() -> None:
    """Start the agent when this process imports torch (called by the bootstrap)."""
    config = ChildConfig.from_env()
    if config is None or _current is not None:
        return
    if "torch" in sys.modules:
        _activate(config)
    else:
        sys.meta_path.insert(0, _AfterTorchImport(config))


class _AfterTorchImport(importlib.abc.MetaPathFinder):
    """Lets the usual finders find torch, then runs the agent once torch has been executed."""

    def __init__(self, config: ChildConfig) -> None:
        self.config = config

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "torch":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)  # one shot; also keeps find_spec below from recursing
        spec = importlib.util.find_spec("torch")
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        config = self.config

        def exec_module(module: ModuleType) -> None:
            with contextlib.suppress(AttributeError):
                del loader.exec_module  # the loader is torch's own again
            original(module)
            _activate(config)

        loader.exec_module = exec_module
        return spec


def _activate(config: ChildConfig) -> None:
    try:
        from tensor_dap.agent.engine import Watch

        if config.simulate:  # the run's simulated device, before the watch (see simulate)
            from tensor_dap import simulate

            simulate.start(config.simulate)
        watch = Watch(rules=config.rules, options=config.options)
        agent = ProcessAgent(config, watch)
        agent.start_duties()
        agent.connect_debugger()
        if threading.current_thread() is threading.main_thread():
            watch.start()
        follow_forks(agent)
    except Exception:
        log.warning("tensor-dap: no agent in process %d", os.getpid(), exc_info=True)


class ProcessAgent:
    """What the agent does in one process: the watch, and where its findings and rows go."""

    def __init__(self, config: ChildConfig, watch: Any, own_process: bool = False) -> None:
        self.config = config
        self.watch = watch
        #: the process tensor-dap runs in itself: it reports its own findings, a child does not
        self.own_process = own_process
        self.session: Any = None
        self.findings_log: Any = None
        self._finished = False

    # -- a child's duties ------------------------------------------------------------------
    def start_duties(self) -> None:
        """Findings to the run's log (and stderr, and the debugger), rows to the trace store."""
        from tensor_dap.agent.findings_log import FindingsLog

        config = self.config
        self.own_process = False
        self._finished = False
        sinks: list[Any] = []
        if config.echo:
            from tensor_dap import report

            sinks.append(lambda finding, _frame: report.print_finding(finding))
        if config.run_dir:  # written on the first finding and at exit: a fork that execs
            self.findings_log = FindingsLog(config.run_dir)  # at once leaves no trace
            sinks.append(self.findings_log)
        if config.suspend:
            from tensor_dap.agent.suspend import suspend_on_finding

            sinks.append(suspend_on_finding)
        self.watch.sinks = sinks
        self.session = None
        if config.trace and config.run_id is not None:
            self._join_trace_run(config.trace, config.run_id)
            if config.suspend:  # a debug session: the finding is in the store when it pauses
                sinks.insert(0, lambda _finding, _frame: self._flush())
        atexit.register(self.finish)

    def _join_trace_run(self, db_path: str, run_id: int) -> None:
        from tensor_dap.agent.recorder import LabelledRecorder
        from tensor_dap.agent.trace_session import TraceSession

        recorder = LabelledRecorder()
        self.watch.recorder = recorder
        self.session = TraceSession(
            db_path,
            recorder,
            self.watch.line_hits,
            "check",
            list(sys.argv),
            os.getcwd(),
            run_id=run_id,
        )
        self.session.start(self.watch.findings)

    def connect_debugger(self, wait: bool = True) -> None:
        """Under the debug adapter: take its rule set now and whenever the user changes it."""
        from tensor_dap.agent.channel import ChannelClient
        from tensor_dap.channel_protocol import address_from_environment

        address = address_from_environment()
        if address is None or not self.config.suspend:
            return
        from tensor_dap.agent import data_watch
        from tensor_dap.agent.late_start import rules_callback

        starter = rules_callback(self.watch)
        # data breakpoints in this process too (the adapter's requests reach every agent)
        data_watch.bind(self.watch, getattr(getattr(starter, "__self__", None), "wake", None))

        def connect() -> None:
            try:
                client = ChannelClient(
                    address, starter, on_flush=self._flush, on_message=data_watch.channel_message
                )
            except OSError as error:
                log.warning("tensor-dap: cannot reach the debug adapter: %s", error)
                return
            if client.first_rules is not None:
                starter(client.first_rules)

        if wait:
            connect()
        else:
            start_tool_thread(connect, "tensor-dap-agent")

    def _flush(self) -> None:
        """The program paused (the adapter says so): this process's rows to the store now."""
        if self.session is not None:
            self.session.flush()

    def finish(self) -> None:
        """At exit: the last rows to the trace store, the end record to the findings log."""
        if self._finished or self.own_process:
            return
        self._finished = True
        with contextlib.suppress(Exception):
            if _ended_by_an_error():
                self.watch.program_failed()
            self.watch.finish()
        with contextlib.suppress(Exception):
            if self.session is not None:
                self.session.finish({})
        with contextlib.suppress(Exception):
            if self.findings_log is not None:
                self.findings_log.end(self.watch.counts, self.watch.failed)

    # -- fork ------------------------------------------------------------------------------
    def before_fork(self) -> None:
        """No trace-store write may be half done when the process forks."""
        lock = getattr(self.session, "_lock", None)
        self._fork_lock = lock if lock is not None and lock.acquire(timeout=2) else None

    def after_fork_in_parent(self) -> None:
        lock, self._fork_lock = getattr(self, "_fork_lock", None), None
        if lock is not None:
            lock.release()

    def after_fork_in_child(self) -> None:
        _inherited.append((self.session, self.findings_log))
        self.watch.forget_parent()
        self.start_duties()
        self.connect_debugger(wait=False)
        # multiprocessing ends its children with os._exit, past atexit: its finalizers run
        with contextlib.suppress(Exception):
            from multiprocessing import util

            util.register_after_fork(self, ProcessAgent._finalize_with_multiprocessing)

    def _finalize_with_multiprocessing(self) -> None:
        from multiprocessing import util

        util.Finalize(None, self.finish, exitpriority=0)


def follow_forks(agent: ProcessAgent) -> None:
    """Make ``agent``'s forked children report as themselves (see :meth:`after_fork_in_child`)."""
    global _current, _forks_followed
    _current = agent
    if _forks_followed or not hasattr(os, "register_at_fork"):
        return
    _forks_followed = True
    os.register_at_fork(
        before=lambda: _call("before_fork"),
        after_in_parent=lambda: _call("after_fork_in_parent"),
        after_in_child=lambda: _call("after_fork_in_child"),
    )


def _call(method: str) -> None:
    if _current is None:
        return
    try:
        getattr(_current, method)()
    except Exception:
        log.warning("tensor-dap: %s failed", method, exc_info=True)


def _ended_by_an_error() -> bool:
    """Whether the process is ending on an uncaught exception of its program: Python sets
    ``sys.last_exc`` (3.12+) or ``sys.last_value`` as it prints one, before the exit handlers
    run (``tensor-dap check`` learns it from its runner; a process the program started, from
    this). What the program then did not get to do is no finding (``Watch.program_failed``)."""
    return (
        getattr(sys, "last_exc", None) is not None or getattr(sys, "last_value", None) is not None
    )
