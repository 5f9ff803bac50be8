"""The per-line tracer: what to print when a traced frame starts, runs a line, returns.

Backends (:mod:`tensor_dap.linetrace.backends`: ``sys.monitoring`` on 3.12+, ``sys.settrace``
before) only deliver events; this module decides which frames are traced and what is shown.

Loops are summarised: each (code, line) is shown fully for its first ``FULL_RUNS`` executions;
after that a line is shown only when it gave a tensor variable a new summary (shape, dtype,
device or grad state) or created a variable; each frame ends with ``... line N ran K times``
for its hot lines, so a 10,000-step loop gives a trace of a few dozen lines.

Calls are summarised the same way: a function (or comprehension) called more than
``FULL_RUNS`` times runs quietly: a line of it is shown only when it gives a variable a summary
(a tensor's shape, dtype, device or grad state; another value's type) other than the one that
line gave it in the previous calls — a batch of another shape, ``None`` where a tensor was —
and the call itself only when an argument's summary changed; the runs of its lines are counted
at the end.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import weakref
from types import CodeType, FrameType
from typing import Any, Optional, Sequence

import torch

from tensor_dap.agent import frames
from tensor_dap.agent.value_summary import is_described
from tensor_dap.linetrace import output
from tensor_dap.linetrace.source import definition_line, source_text
from tensor_dap.linetrace.store import LineStore
from tensor_dap.linetrace.values import extra_key, hidden, safe_repr, show, tensor_meta

FULL_RUNS = 3
_MISSING = object()
_Tensor = torch.Tensor
_PARENT_SEARCH = 64
Change = tuple[str, str, str, bool]
"""(kind, name, text, significant): a variable that is new or changed, as the trace shows it."""


class FrameState:
    """One traced frame: its variables as last shown and the line that ran last."""

    __slots__ = (
        "code",
        "depth",
        "refs",
        "extras",
        "texts",
        "metas",
        "last_line",
        "pending",
        "runs",
        "changed",
        "quiet",
        "announced",
    )

    def __init__(self, code: CodeType, depth: int) -> None:
        self.code = code
        self.depth = depth
        #: the objects last seen bound to each name, weakly where they take weak references
        #: (a tensor the program deletes must die, as without the trace; a weak reference to
        #: a freed one is dead, so a new object at its address is still seen as new), else
        #: held (numbers, strings, lists); mutation keys of tensors (version counter, grad
        #: flag) and containers (length)
        self.refs: dict[str, Any] = {}
        self.extras: dict[str, Any] = {}
        self.texts: dict[str, str] = {}
        #: each name's summary key: a tensor's (shape, dtype, device, grad, grad_fn type),
        #: another value's type
        self.metas: dict[str, Any] = {}
        self.last_line: Optional[int] = None
        #: a hot line not printed yet (printed if it turns out to change a tensor's summary)
        self.pending: Optional[int] = None
        #: line -> runs in this frame; line -> lines printed because a summary changed
        self.runs: dict[int, int] = {}
        self.changed: dict[int, int] = {}
        #: a call past the first ``FULL_RUNS`` of its code: compared with the previous call
        self.quiet = False
        #: its ``call`` line was shown
        self.announced = False


class Tracer:
    """Decides which frames are traced and prints their lines and variables.

    ``roots``: code objects traced wherever they run (snoop's decorated function); with
    ``roots`` given, other code is traced only below a traced frame. ``max_depth``: how many
    levels of calls are traced (1 = the root only); None = any depth.
    """

    def __init__(
        self,
        sink: output.Sink,
        *,
        max_depth: Optional[int] = None,
        only: Optional[str] = None,
        nan: bool = False,
        watch: Sequence[str] = (),
        store: Optional[LineStore] = None,
        roots: Optional[set[CodeType]] = None,
    ) -> None:
        self.sink = sink
        self.max_depth = max_depth
        self.only = only
        self.nan = nan
        self.watch = [(expr, compile(expr, "<watch>", "eval")) for expr in watch]
        self.watched = frozenset(watch)
        self.store = store
        self.roots = roots
        self.states: dict[FrameType, FrameState] = {}
        #: id(code) -> (code, wanted)
        self._wanted: dict[int, tuple[CodeType, bool]] = {}
        #: (code, line) -> runs in all frames
        self.total: dict[tuple[CodeType, int], int] = {}
        self._summarised: set[tuple[CodeType, int]] = set()
        self._calls: dict[CodeType, int] = {}
        #: (code, line, name) -> the summary key (see ``FrameState.metas``) that line last gave
        #: the variable, in any call (line 0: the call's arguments)
        self._line_keys: dict[tuple[CodeType, int, str], Any] = {}
        #: (code, line) -> lines shown because a summary changed, in all calls
        self._changed_total: dict[tuple[CodeType, int], int] = {}
        #: lines that ran in quiet calls (their runs are summarised at the end)
        self._ran_quietly: set[tuple[CodeType, int]] = set()

    # -- which frames ---------------------------------------------------------------------
    def wanted(self, code: CodeType) -> bool:
        """Whether frames of ``code`` may be traced (cached per code object)."""
        entry = self._wanted.get(id(code))
        if entry is None:
            entry = self._wanted[id(code)] = (code, self._decide(code))
        return entry[1]

    def _decide(self, code: CodeType) -> bool:
        if self.roots is not None and code in self.roots:
            return True
        if code.co_filename.startswith("<") or not frames.is_user_code(code):
            return False  # generated code (dataclasses, namedtuples, exec'd strings) included
        if self.only:
            name = getattr(code, "co_qualname", code.co_name)
            path = code.co_filename
            return any(
                fnmatch.fnmatch(text, self.only)
                for text in (path, os.path.basename(path), code.co_name, name)
            )
        return True

    def _traced_parent(self, frame: FrameType) -> Optional[FrameState]:
        """The nearest traced frame below ``frame`` on the stack (a few levels looked at)."""
        parent = frame.f_back
        for _ in range(_PARENT_SEARCH):
            if parent is None:
                return None
            state = self.states.get(parent)
            if state is not None:
                return state
            parent = parent.f_back
        return None

    def _depth(self, frame: FrameType) -> Optional[int]:
        parent = self._traced_parent(frame)
        if parent is not None:
            return parent.depth + 1
        if self.roots is None or frame.f_code in self.roots:
            return 0
        return None

    # -- events ---------------------------------------------------------------------------
    def enter(self, frame: FrameType) -> Optional[FrameState]:
        """A frame starts: its state when it is traced, else None."""
        state = self.states.get(frame)
        if state is not None:
            return state
        code = frame.f_code
        if not self.wanted(code):
            return None
        depth = self._depth(frame)
        if depth is None or (self.max_depth is not None and depth >= self.max_depth):
            return None
        state = self.states[frame] = FrameState(code, depth)
        calls = self._calls[code] = self._calls.get(code, 0) + 1
        loud = calls <= FULL_RUNS
        state.quiet = not loud
        starts = self._news(state, 0, self._diff(frame, state, "start"))
        if state.quiet:  # (shown only when an argument's summary changed since earlier calls)
            starts = [change for change in starts if change[3]]
            loud = bool(starts)
        if loud:
            self._flush_parent(frame)
        for kind, name, text, _ in starts if loud else ():
            self.sink.line(output.value_line(depth, kind, name, text))
        if loud and code.co_name != "<module>":
            self._announce(state)
        return state

    def _announce(self, state: FrameState) -> None:
        """Show the ``call`` line of the frame (its function's definition)."""
        state.announced = True
        line = definition_line(state.code)
        self.sink.line(output.event_line(state.depth, "call", line, source_text(state.code, line)))

    def attach(self, frame: FrameType) -> FrameState:
        """Trace an already running frame from its next line (``with snoop():``)."""
        state = self.states.get(frame)
        if state is None:
            state = self.states[frame] = FrameState(frame.f_code, 0)
            self._wanted[id(frame.f_code)] = (frame.f_code, True)
        return state

    def line(self, frame: FrameType, lineno: Optional[int]) -> None:
        state = self.states.get(frame)
        if state is None or not lineno:
            return  # line 0 / None: the interpreter's own start of a module, no user line
        self._settle(frame, state)
        code = state.code
        key = (code, lineno)
        total = self.total[key] = self.total.get(key, 0) + 1
        state.runs[lineno] = state.runs.get(lineno, 0) + 1
        state.last_line = lineno
        if total <= FULL_RUNS:
            state.pending = None
            if state.quiet and not state.announced:  # a line's first runs, in a quiet call
                self._flush_parent(frame)
                self._announce(state)
            text = source_text(code, lineno)
            self.sink.line(output.event_line(state.depth, "line", lineno, text))
        else:
            state.pending = lineno

    def leave(self, frame: FrameType, value: Any) -> None:
        """A frame returns ``value``."""
        state = self.states.get(frame)
        if state is None:
            return
        self._settle(frame, state)
        if state.code.co_name != "<module>":
            # (a quiet call's return is shown when its summary is not the earlier calls')
            where = (state.code, 0, _RETURN)
            with torch._C.DisableTorchFunction():
                key = _summary_key(value)
            shown = self._calls.get(state.code, 0) <= FULL_RUNS
            if not shown and self._line_keys.get(where, _MISSING) != key:
                shown = True
                self._flush_parent(frame)
                if not state.announced:
                    self._announce(state)
                self._flush(state)
            self._line_keys[where] = key
            if shown:
                line = frame.f_lineno
                depth = state.depth
                text = source_text(state.code, line)
                self.sink.line(output.event_line(depth, "return", line, text))
                self.sink.line(output.value_line(depth, "return", None, show(value, self.nan)))
        self._finish(frame, state)

    def unwind(self, frame: FrameType, error: BaseException) -> None:
        """A frame exits by an exception."""
        state = self.states.get(frame)
        if state is None:
            return
        self._settle(frame, state)
        line = frame.f_lineno
        depth = state.depth
        self.sink.line(output.event_line(depth, "exception", line, source_text(state.code, line)))
        text = safe_repr(f"{type(error).__name__}: {error}", 200).strip("'\"")
        self.sink.line(output.value_line(depth, "exception", None, text))
        self._finish(frame, state)

    def detach(self, frame: FrameType) -> None:
        """Stop tracing a frame that goes on running (end of ``with snoop():``)."""
        state = self.states.get(frame)
        if state is not None:
            self._settle(frame, state)
            self._finish(frame, state)

    def finding(self, finding: Any, frame: Optional[FrameType]) -> None:
        """A rule's finding, printed inline at its line (``on_finding`` of the watch)."""
        state = self.states.get(frame) if frame is not None else None
        if state is not None:
            self._flush(state)
            where = ""
        else:
            where = f"{os.path.basename(finding.path)}:{finding.line}"
        depth = state.depth if state is not None else 0
        self.sink.line(output.finding_line(depth, finding.rule, finding.message, where))

    def close(self) -> None:
        """Summaries of lines that ran often across many calls (each call ran them rarely)."""
        for frame, _state in list(self.states.items()):
            self.detach(frame)
        for (code, line), runs in self.total.items():
            key = (code, line)
            if runs > FULL_RUNS and (key not in self._summarised or key in self._ran_quietly):
                where = f"{os.path.basename(code.co_filename)}:{code.co_name}"
                changes = self._changed_total.get(key, 0)
                self.sink.line(output.summary_line(0, line, runs, changes, where))
        self.sink.close()

    # -- inside ---------------------------------------------------------------------------
    def _finish(self, frame: FrameType, state: FrameState) -> None:
        for line, changes in state.changed.items():
            key = (state.code, line)
            self._changed_total[key] = self._changed_total.get(key, 0) + changes
        if state.quiet:
            self._ran_quietly.update((state.code, line) for line in state.runs)
        for line, runs in sorted(state.runs.items()):
            if runs > FULL_RUNS and not state.quiet:  # (a quiet call's: counted at the end)
                self._summarised.add((state.code, line))
                changes = state.changed.get(line, 0)
                self.sink.line(output.summary_line(state.depth, line, runs, changes))
        self.states.pop(frame, None)

    def _flush(self, state: FrameState) -> None:
        if state.pending is not None:
            line, state.pending = state.pending, None
            text = source_text(state.code, line)
            self.sink.line(output.event_line(state.depth, "line", line, text))

    def _flush_parent(self, frame: FrameType) -> None:
        parent = self._traced_parent(frame)
        if parent is not None:
            self._flush(parent)

    def _settle(self, frame: FrameType, state: FrameState) -> None:
        """Show what the last line changed (all of it for a line still shown in full)."""
        changes = self._news(state, state.last_line or 0, self._diff(frame, state, "new"))
        if state.quiet:  # a quiet call: only what differs from the previous calls' summaries
            changes = [change for change in changes if change[3]]
        if not changes:
            return
        line = state.last_line
        if state.pending is not None:  # a hot line: show it only for a new tensor summary
            if not any(significant for *_, significant in changes):
                return
            if line is not None:
                state.changed[line] = state.changed.get(line, 0) + 1
            self._flush(state)
        depth = state.depth
        for kind, name, text, _ in changes:
            self.sink.line(output.value_line(depth, kind, name, text))

    def _news(self, state: FrameState, line: int, changes: list[Change]) -> list[Change]:
        """``changes``, significant in a quiet call when the summary key is not the one ``line``
        gave the variable before (in any call); the keys are remembered."""
        news = []
        keys = self._line_keys
        for kind, name, text, significant in changes:
            where = (state.code, line, name)
            key = state.metas.get(name)
            if state.quiet:
                significant = keys.get(where, _MISSING) != key
            keys[where] = key
            news.append((kind, name, text, significant))
        return news

    def _diff(self, frame: FrameType, state: FrameState, new_kind: str) -> list[Change]:
        """(kind, name, text, significant) for each variable that is new or changed."""
        try:
            values = frame.f_locals
        except Exception:
            return []
        if self.watch:
            values = dict(values)
            for expr, compiled in self.watch:
                with contextlib.suppress(Exception):
                    values[expr] = eval(compiled, frame.f_globals, frame.f_locals)
        refs, extras, texts, metas = state.refs, state.extras, state.texts, state.metas
        changes = []
        store = self.store
        nan = self.nan
        line = state.last_line
        watched = self.watched
        with torch._C.DisableTorchFunction():
            items = tuple(values.items())
            if len(refs) > len(items):  # names deleted (`del t`): let their objects go
                for name in refs.keys() - dict(items).keys():
                    del refs[name]
            for name, value in items:
                held = refs.get(name, _MISSING)
                old = held if held is _MISSING else _referent(held)
                if old is value:  # same object: changed only if mutated in a way we can see
                    extra = extras.get(name)
                    if extra is None or extra == extra_key(value):
                        continue
                elif (
                    name not in texts
                    and name not in watched
                    and hidden(name, value, old is _MISSING)
                ):
                    refs[name] = _reference(value)
                    continue
                refs[name] = _reference(value)
                extras[name] = extra_key(value)
                before = texts.get(name)
                if isinstance(value, _Tensor):
                    meta = tensor_meta(value)
                    same = before is not None and not nan and metas.get(name) == meta
                    metas[name] = meta
                    text = before if same and before is not None else show(value, nan)
                    texts[name] = text
                    if store is not None and line is not None:
                        store.observe(state.code, line, name, value, meta)
                    if before is None:
                        changes.append((new_kind, name, text, True))
                    elif before != text:
                        changes.append(("modified", name, text, True))
                    elif old is not value:
                        changes.append(("modified", name, text, False))
                    continue
                text = show(value, nan)
                texts[name] = text
                metas[name] = type(value)  # (what a later tensor's summary is compared with)
                if store is not None and line is not None and is_described(value):
                    store.observe(state.code, line, name, value, text)  # a module, a list
                if before is None:
                    changes.append((new_kind, name, text, True))
                elif before != text:
                    changes.append(("modified", name, text, False))
        return changes


#: the name a call's return value is remembered under in ``_line_keys``
_RETURN = " return"


def _summary_key(value: Any) -> Any:
    """What a returned value's summary is compared by: a tensor's shape, dtype, device and
    grad; the items' of a tuple (``return out, hidden``); else its type."""
    if isinstance(value, _Tensor):
        return tensor_meta(value)
    if type(value) is tuple:
        return tuple(tensor_meta(v) if isinstance(v, _Tensor) else type(v) for v in value[:8])
    return type(value)


class _Held:
    """An object that takes no weak reference (a number, a list), held as it is."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _reference(value: Any) -> Any:
    try:
        return weakref.ref(value)
    except TypeError:
        return _Held(value)


def _referent(reference: Any) -> Any:
    """The object :func:`_reference` refers to; ``_MISSING`` once a weakly held one died."""
    if type(reference) is _Held:
        return reference.value
    found = reference()
    return _MISSING if found is None else found
