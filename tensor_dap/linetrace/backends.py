"""Event sources for the tracer: ``sys.monitoring`` (PEP 669) on Python 3.12+, ``sys.settrace``
on 3.9-3.11.

Why two: ``sys.settrace`` calls a Python function on every call of every function, torch's
included; the tracer returns no local tracer for non-user frames, so those cost one call and a
dict lookup each. ``sys.monitoring`` does better: a ``PY_START`` callback returns ``DISABLE`` for
code that is not traced, after which that code runs at full speed, and ``LINE`` events are
switched on only for the code objects being traced.
"""

from __future__ import annotations

import sys
from types import CodeType, FrameType
from typing import Any, Optional

from tensor_dap.linetrace.tracer import Tracer

MONITORING = sys.version_info >= (3, 12) and hasattr(sys, "monitoring")


class SettraceBackend:
    """``sys.settrace`` limited to user frames: a local tracer only where the tracer wants it."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self._previous: Any = None
        self._errors: dict[FrameType, BaseException] = {}

    def start(self) -> None:
        self._previous = sys.gettrace()
        # the global function runs on every call of every Python function, torch's included:
        # answer "not traced" for known library code with one dict lookup and no method call
        known = self.tracer._wanted
        slow_path = self._global

        def global_trace(frame: FrameType, event: str, arg: Any) -> Any:
            entry = known.get(id(frame.f_code))
            if entry is not None and not entry[1]:
                return None
            return slow_path(frame, event, arg)

        sys.settrace(global_trace)

    def stop(self) -> None:
        sys.settrace(self._previous)
        self._errors.clear()

    def attach(self, frame: FrameType) -> None:
        self.tracer.attach(frame)
        frame.f_trace = self._local

    def detach(self, frame: FrameType) -> None:
        frame.f_trace = None
        self.tracer.detach(frame)

    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call" or not self.tracer.wanted(frame.f_code):
            return None
        return self._local if self.tracer.enter(frame) is not None else None

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        tracer = self.tracer
        if event == "line":
            if self._errors:
                self._errors.pop(frame, None)  # the exception was caught here
            tracer.line(frame, frame.f_lineno)
        elif event == "return":
            error = self._errors.pop(frame, None) if self._errors else None
            if error is not None and arg is None:
                tracer.unwind(frame, error)
            else:
                tracer.leave(frame, arg)
        elif event == "exception":
            self._errors[frame] = arg[1]
        return self._local


class MonitoringBackend:
    """``sys.monitoring``: PY_START everywhere (DISABLEd per non-traced code); LINE, PY_RETURN,
    JUMP (backward only), PY_YIELD and PY_RESUME only on traced code objects; PY_UNWIND to see
    exits by exception. Events are mapped to what ``sys.settrace`` reports."""

    #: whether some session returned DISABLE (its locations stay disabled until restarted)
    _disabled_some = False

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self.tool: Optional[int] = None
        self._enabled: dict[int, CodeType] = {}
        #: id(code) -> {bytecode offset: line}, for JUMP events (of enabled code only)
        self._lines: dict[int, dict[int, Optional[int]]] = {}

    def start(self) -> None:
        mon = sys.monitoring  # type: ignore[attr-defined]
        for tool in (4, 3, 5, 2, 1):
            if mon.get_tool(tool) is None:
                mon.use_tool_id(tool, "tensor-dap trace")
                self.tool = tool
                break
        else:
            raise RuntimeError("tensor-dap: no free sys.monitoring tool id")
        if MonitoringBackend._disabled_some:
            # DISABLE outlives set_events(tool, 0) and free_tool_id: without this, code that
            # an earlier session chose not to trace (``only=``) would never start this one's.
            mon.restart_events()
            MonitoringBackend._disabled_some = False
        events = mon.events
        mon.register_callback(self.tool, events.PY_START, self._start)
        mon.register_callback(self.tool, events.LINE, self._line)
        mon.register_callback(self.tool, events.PY_RETURN, self._return)
        mon.register_callback(self.tool, events.PY_UNWIND, self._unwind)
        mon.register_callback(self.tool, events.JUMP, self._jump)
        mon.register_callback(self.tool, events.PY_YIELD, self._yield)
        mon.register_callback(self.tool, events.PY_RESUME, self._resume)
        mon.set_events(self.tool, events.PY_START | events.PY_UNWIND)

    def stop(self) -> None:
        if self.tool is None:
            return
        mon = sys.monitoring  # type: ignore[attr-defined]
        mon.set_events(self.tool, 0)
        for code in self._enabled.values():
            mon.set_local_events(self.tool, code, 0)
        events = mon.events
        for event in (events.PY_START, events.LINE, events.PY_RETURN, events.PY_UNWIND):
            mon.register_callback(self.tool, event, None)
        for event in (events.JUMP, events.PY_YIELD, events.PY_RESUME):
            mon.register_callback(self.tool, event, None)
        if hasattr(mon, "clear_tool_id"):
            mon.clear_tool_id(self.tool)
        mon.free_tool_id(self.tool)
        self._enabled.clear()
        self._lines.clear()
        self.tool = None

    def attach(self, frame: FrameType) -> None:
        self.tracer.attach(frame)
        self._enable(frame.f_code)

    def detach(self, frame: FrameType) -> None:
        self.tracer.detach(frame)

    def _enable(self, code: CodeType) -> None:
        if id(code) not in self._enabled:
            mon = sys.monitoring  # type: ignore[attr-defined]
            self._enabled[id(code)] = code
            events = mon.events
            wanted = events.LINE | events.PY_RETURN | events.JUMP | events.PY_YIELD
            mon.set_local_events(self.tool, code, wanted | events.PY_RESUME)

    def _start(self, code: CodeType, offset: int) -> Any:
        if not self.tracer.wanted(code):
            MonitoringBackend._disabled_some = True
            return sys.monitoring.DISABLE  # type: ignore[attr-defined]
        if self.tracer.enter(sys._getframe(1)) is not None:
            self._enable(code)
        return None

    def _line(self, code: CodeType, line: int) -> Any:
        self.tracer.line(sys._getframe(1), line)
        return None

    def _return(self, code: CodeType, offset: int, value: Any) -> Any:
        self.tracer.leave(sys._getframe(1), value)
        return None

    def _jump(self, code: CodeType, source: int, target: int) -> Any:
        """A backward jump within one line (``for x in y: f(x)``, an inlined comprehension)
        runs that line again: ``sys.settrace`` reports it, LINE does not."""
        if target > source:
            MonitoringBackend._disabled_some = True
            return sys.monitoring.DISABLE  # type: ignore[attr-defined]
        lines = self._lines.get(id(code))
        if lines is None:
            lines = self._lines[id(code)] = {
                offset: line
                for start, end, line in code.co_lines()
                for offset in range(start, end, 2)
            }
        line = lines.get(target)
        if line is not None and line == lines.get(source):
            self.tracer.line(sys._getframe(1), line)
        return None

    def _yield(self, code: CodeType, offset: int, value: Any) -> Any:
        self.tracer.leave(sys._getframe(1), value)  # as sys.settrace: a yield returns
        return None

    def _resume(self, code: CodeType, offset: int) -> Any:
        self.tracer.enter(sys._getframe(1))  # and resuming is a new call
        return None

    def _unwind(self, code: CodeType, offset: int, error: BaseException) -> Any:
        if self.tracer.states:
            self.tracer.unwind(sys._getframe(1), error)
        return None


def make_backend(tracer: Tracer, monitoring: Optional[bool] = None) -> Any:
    """The best backend for this Python (``monitoring`` forces a choice, for tests)."""
    use = MONITORING if monitoring is None else monitoring
    return MonitoringBackend(tracer) if use else SettraceBackend(tracer)
