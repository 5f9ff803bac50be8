"""The trace recorder: what each user line left in the names it assigns, for the editor's hints.

The engine hands it op outputs together with the user's frame — sampled per call site (the
first hits, then one in 64). An op's output is often an intermediate (the last bias a
``.to(device)`` moved, a CPU tensor a helper then moves), so the recorder describes the value
the line *binds*, read once the line has finished:

- a line has finished when its frame runs an op on another statement, calls into another user
  frame from another statement, or runs the same statement again (a loop); the names it binds
  (``x``, each of ``x, y = batch``, ``self.w``, the receiver of ``y.add_(1)``) are then read
  from the frame's locals (globals at module level) and described from metadata only
  (:mod:`tensor_dap.agent.value_summary`: tensors, modules, lists/tuples/dicts of tensors) —
  provided no other statement may have bound the name since (:mod:`~.line_targets`);
- the statements that ran in a straight line next to it without an op of their own
  (``x, y = batch``) are read at the same time;
- a line whose frame returned before it could be read (a function's last line, ``return ...``)
  is described by the op that made the bound value itself — an op the line called directly,
  at the exact span of the assigned expression — or not at all.

No frame, tensor or container is kept: a pending line holds its code, its statement and the
metadata of that one op's output. Rows are per (code, line, name): bounded by the code's size.
"""

from __future__ import annotations

import os
import threading
from types import CodeType, FrameType
from typing import Any, Callable, Optional

from tensor_dap.agent import frames
from tensor_dap.agent.line_targets import (
    ATTRIBUTE,
    NAME,
    VALUE,
    Statement,
    Target,
    rebound_between,
    statement_at,
    straight_after,
    straight_before,
)
from tensor_dap.agent.value_summary import Summary, describe, describe_tensor, observation
from tensor_dap.tracedb import Observation

LineHits = Callable[[CodeType, int], int]

_INNER = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"})
"""Code run inside a user statement (a comprehension): its ops belong to the enclosing frame."""
_MISSING = object()
_get_ident = threading.get_ident


class _Pending:
    """A statement running (or just run) in a live frame, not yet read."""

    __slots__ = ("code", "statement", "lasti", "value", "value_lasti")

    def __init__(self, code: CodeType, statement: Statement, lasti: int) -> None:
        self.code = code
        self.statement = statement
        self.lasti = lasti
        #: the bound value, when an op called at the assigned expression's span made it (and
        #: the instruction that called it)
        self.value: Optional[Summary] = None
        self.value_lasti = -1


class _Thread:
    __slots__ = ("pending", "owner", "code")

    def __init__(self) -> None:
        self.pending: dict[int, _Pending] = {}  # id(frame) -> its running statement
        self.owner = 0  # id of the frame of the last op seen, and its code
        self.code: Optional[CodeType] = None


class TraceRecorder:
    """Collects per-line descriptions of the values user lines bind."""

    def __init__(self, process: str = "main") -> None:
        self.process = process
        #: (id(code), line, name) -> [summary, shape_varied, code, line whose op count is the
        #: statement's, times read]
        self._rows: dict[tuple[int, int, str], list[Any]] = {}
        self._threads: dict[int, _Thread] = {}
        #: id(code) -> (code, its instructions' positions); the code is kept so ids stay unique
        self._positions: dict[int, tuple[CodeType, list[Any]]] = {}
        #: (id(statement), id(previous)) -> the statements run in between without an op seen
        #: (statements live as long as their file's cache: ids stay unique)
        self._skips: dict[tuple[int, int], list[Statement]] = {}

    # -- the engine's hook ---------------------------------------------------------------------
    def observe(self, frame: FrameType, tensor: Any, direct: bool = True) -> None:
        """An op called from user ``frame`` made ``tensor`` (``direct``: the frame called it
        itself, not through torch's Python code)."""
        owner = frame
        while owner.f_code.co_name in _INNER and owner.f_back is not None:
            owner = owner.f_back
            direct = False
        code = owner.f_code
        statement = statement_at(code.co_filename, owner.f_lineno)
        if statement is None:
            return
        ident = _get_ident()
        state = self._threads.get(ident)
        if state is None:
            state = self._threads[ident] = _Thread()
        fid = id(owner)
        if state.owner != fid or state.code is not code:
            state.owner, state.code = fid, code
            self._settle(state, owner)
        lasti = owner.f_lasti
        pending = self._advance(state, owner, fid, statement, lasti)
        if direct and statement.value is not None and self._span(code, lasti) == statement.value:
            if pending.value_lasti == lasti:  # a tuple or list the op made, item by item
                pending.value = None
            else:
                pending.value, pending.value_lasti = describe_tensor(tensor), lasti

    # -- reading finished statements -----------------------------------------------------------
    def _advance(
        self, state: _Thread, frame: FrameType, fid: int, statement: Statement, lasti: int
    ) -> _Pending:
        """The pending statement of ``frame``, now running ``statement``: a new one when the
        frame moved on (the one before is read) or runs the statement again."""
        pending = state.pending.get(fid)
        if pending is not None and pending.code is not frame.f_code:
            self._abandon(pending)  # another frame at a freed one's address
            pending = None
        if pending is not None:
            if pending.statement is statement:
                if lasti >= pending.lasti or statement.inner_loop:  # still the same run
                    pending.lasti = lasti
                    return pending
                if statement.loops:  # the loop came round: the earlier run finished
                    self._read(pending, frame, statement)
                else:  # not a loop: a new call in a freed frame's place
                    self._abandon(pending)
                    pending = None
            elif statement.line < pending.statement.line and not statement.in_loop_with(
                pending.statement
            ):
                self._abandon(pending)  # backwards without a loop: a new call
                pending = None
            else:
                self._read(pending, frame, statement)
        self._read_skipped(frame, statement, None if pending is None else pending.statement)
        new = state.pending[fid] = _Pending(frame.f_code, statement, lasti)
        return new

    def _settle(self, state: _Thread, owner: FrameType) -> None:
        """The op's frame is not the last op's: read the pending statements of the frames that
        returned, and of the callers that moved on to another statement (a call in progress
        keeps theirs pending; a caller without one gets its calling statement)."""
        live: dict[int, FrameType] = {}
        frame = owner.f_back
        while frame is not None:
            code = frame.f_code
            if code.co_name not in _INNER and frames.is_user_code(code):
                live[id(frame)] = frame
            frame = frame.f_back
        own = id(owner)
        for fid, pending in list(state.pending.items()):
            if fid != own and fid not in live:
                del state.pending[fid]
                self._abandon(pending)
        for fid, frame in live.items():
            statement = statement_at(frame.f_code.co_filename, frame.f_lineno)
            if statement is None:
                continue
            running = state.pending.get(fid)
            if running is None or running.statement is not statement:
                self._advance(state, frame, fid, statement, frame.f_lasti)

    def _read(self, pending: _Pending, frame: FrameType, now: Statement) -> None:
        """``pending``'s statement finished and ``frame`` is at ``now``: describe its names."""
        try:
            values = frames.read_locals(frame)
        except Exception:
            values = {}
        statement = pending.statement
        for target in statement.targets:
            summary = None
            if pending.value is not None and not target.unpacked:
                summary = pending.value  # the op that made the bound value, seen as it was made
            elif target.kind != VALUE and not rebound_between(
                pending.code.co_filename, target, statement, now.line
            ):
                summary = describe(_value(target, values))
            if summary is not None:
                self._store(pending.code, statement, target, summary, statement.line)

    def _read_skipped(
        self, frame: FrameType, now: Statement, previous: Optional[Statement]
    ) -> None:
        """Statements that ran in a straight line between ``previous`` and ``now`` without an
        op seen on them (``x, y = batch``): their names, as they are now."""
        key = (id(now), id(previous))
        skipped = self._skips.get(key)
        if skipped is None:
            if previous is None or previous.body is not now.body:
                skipped = straight_before(now, None)
            elif previous.index < now.index:
                skipped = straight_after(previous, now)
            else:  # the loop came round: the rest of the block, then its start
                skipped = straight_after(previous, None) + straight_before(now, None)
            self._skips[key] = skipped
        if not skipped:
            return
        try:
            values = frames.read_locals(frame)
        except Exception:
            return
        code = frame.f_code
        for statement in skipped:
            for target in statement.targets:
                if target.kind == VALUE or rebound_between(
                    code.co_filename, target, statement, now.line
                ):
                    continue
                summary = describe(_value(target, values))
                if summary is not None:
                    self._store(code, statement, target, summary, now.line)

    def _abandon(self, pending: _Pending) -> None:
        """The frame returned before its statement could be read: only the op that made the
        bound value describes it."""
        if pending.value is None:
            return
        for target in pending.statement.targets:
            if not target.unpacked:
                self._store(
                    pending.code, pending.statement, target, pending.value, pending.statement.line
                )

    def _store(
        self, code: CodeType, statement: Statement, target: Target, summary: Summary, hits: int
    ) -> None:
        key = (id(code), statement.line, target.text)
        row = self._rows.get(key)
        if row is None:
            self._rows[key] = [summary, False, code, hits, 1]
            return
        row[4] += 1
        old = row[0]
        if old.shape != summary.shape or old.text != summary.text:
            row[1] = True
        row[0] = summary

    def _span(self, code: CodeType, lasti: int) -> Any:
        entry = self._positions.get(id(code))
        if entry is None:
            try:
                positions = [  # (line, end line, col, end col) -> a Span
                    (line, col, end_line, end_col)
                    for line, end_line, col, end_col in code.co_positions()  # type: ignore[attr-defined]
                ]
            except AttributeError:  # Python < 3.11: no instruction spans
                positions = []
            entry = self._positions[id(code)] = (code, positions)
        positions = entry[1]
        index = lasti // 2
        return positions[index] if 0 <= index < len(positions) else None

    # -- the trace session's side --------------------------------------------------------------
    def paths(self) -> set[str]:
        return {os.path.abspath(row[2].co_filename) for row in list(self._rows.values())}

    def observations(self, line_hits: Optional[LineHits] = None) -> list[Observation]:
        """Trace-store rows for everything seen so far (safe to call from another thread).

        ``line_hits(code, line)``: how often the line ran, when known better than by the
        number of times it was read (0 when unknown). Statements still running are included when the
        op that made their value was seen.
        """
        found = {key: tuple(row) for key, row in list(self._rows.items())}
        for state in list(self._threads.values()):
            for pending in list(state.pending.values()):
                if pending.value is None:
                    continue
                statement = pending.statement
                for target in statement.targets:
                    key = (id(pending.code), statement.line, target.text)
                    if not target.unpacked and key not in found:
                        found[key] = (pending.value, False, pending.code, statement.line, 1)
        rows = []
        for (_, line, name), (summary, varied, code, hits_line, reads) in found.items():
            hits = max(line_hits(code, hits_line) if line_hits else 0, reads)
            at = statement_at(code.co_filename, line)
            col = None if at is None else at.end_col
            rows.append(observation(summary, code, line, name, hits, varied, self.process, col))
        return rows


class LabelledRecorder(TraceRecorder):
    """Rows labelled with the process as it is when they are written (``rank 1``,
    ``worker 0``): a DataLoader worker learns its worker id only after the fork that made it."""

    def observations(self, line_hits: Optional[LineHits] = None) -> list[Observation]:
        from tensor_dap.agent.process import process_info
        from tensor_dap.tracedb import process_label

        self.process = process_label(process_info())
        return super().observations(line_hits)


def _value(target: Target, values: Any) -> Any:
    """What ``target`` holds in a frame's ``values``, read without running the user's code
    (attributes from instance and module dicts only); ``_MISSING`` when it cannot be read."""
    try:
        value = values.get(target.parts[0], _MISSING) if target.parts else _MISSING
    except Exception:
        return _MISSING
    if target.kind == NAME or value is _MISSING:
        return value
    if target.kind == ATTRIBUTE:
        for name in target.parts[1:]:
            value = _attribute(value, name)
            if value is _MISSING:
                break
        return value
    return _MISSING


def _attribute(obj: Any, name: str) -> Any:
    try:
        attributes = object.__getattribute__(obj, "__dict__")
    except Exception:
        return _MISSING
    if type(attributes) is not dict:
        return _MISSING
    if name in attributes:
        return attributes[name]
    for registry in ("_parameters", "_buffers", "_modules"):  # an nn.Module's own
        entries = attributes.get(registry)
        if type(entries) is dict and name in entries:
            return entries[name]
    return _MISSING


def statement_end_col(path: str, line: int) -> Optional[int]:
    """The byte column where the statement on ``line`` ends, when it ends on that line."""
    statement = statement_at(path, line)
    return None if statement is None else statement.end_col
