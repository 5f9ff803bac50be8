"""``textDocument/inlayHint``: the shape, dtype, device and grad state a run saw, after the code.

For each line of the requested range with observations in the trace store, one hint per observed
name, at the end of the statement (the stored ``col``, else the end of the line's text without
trailing blanks): ``(64, 10) f32 cuda:0 grad``; a module or a list/tuple/dict of tensors by
the summary the run stored (``Sequential 161 params accel:0``, ``list[4] of ((16, 8), (16, 1))
accel:0``). A name other than the line's assignment target (``y.add_(1)``, each of ``x, y =
batch``) is prefixed: ``y: (6,) f32 cpu``. With several
processes (ranks, workers) the ``main`` process's value is shown, else the first one's, followed
by what other processes saw differently: ``(32, 10) f32 cuda:0 · rank 1: (31, 10)``; the hover
lists them all.

The response is sent as JSON text (:func:`inlay_hints_json`), past pygls's converter, built
straight from the store's rows, line by line as ranges first cover them.

Stale hints: the server hands the features data already matched to the document's text (see
:mod:`tensor_dap.lsp.alignment`): lines edited since the run have no hint, lines moved by an edit
elsewhere keep theirs. :func:`is_stale` is the features' guard when given unmatched data.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from typing import Any, Optional, Sequence

from lsprotocol import types

from tensor_dap.tracedb import Observation

from .store import (
    COL,
    DEVICE,
    DTYPE,
    GRAD_FN,
    NAME,
    PROCESS,
    REQUIRES_GRAD,
    SHAPE_JSON,
    SUMMARY,
    FileData,
    Row,
)
from .text import byte_col_to_utf16, shape_text, short_dtype, summary, utf16_len

_TARGET = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?::[^=]*)?(?:[-+*/@%&|^]|//|\*\*|>>|<<)?=(?!=)")
_MAX_NAME = 30


def assignment_target(line: str) -> Optional[str]:
    """``x = ...`` / ``self.w: T = ...`` / ``x += ...`` -> the target's text, else None."""
    match = _TARGET.match(line)
    return match.group(1) if match else None


def representatives(observations: list[Observation]) -> list[Observation]:
    """One observation per name, in order: the ``main`` process's, else the first one."""
    chosen: dict[str, Observation] = {}
    for obs in observations:
        current = chosen.get(obs.name)
        if current is None or (obs.process == "main" and current.process != "main"):
            chosen[obs.name] = obs
    return list(chosen.values())


def label(obs: Observation, target: Optional[str]) -> str:
    """The hint text for ``obs`` on a line assigning ``target``."""
    if obs.name == target or not obs.name:
        return summary(obs)
    name = obs.name if len(obs.name) <= _MAX_NAME else obs.name[: _MAX_NAME - 1] + "…"
    return f"{name}: {summary(obs)}"


def is_stale(data: FileData, digest: str) -> bool:
    """Whether the document's text differs from the one the run recorded."""
    return data.digest is not None and data.digest != digest


STYLES = ("full", "shape")
"""Hint labels: ``full`` ``(64, 10) f32 cuda:0 grad``; ``shape`` ``(64, 10)`` (the editor
setting ``tensorDap.hints.style``, sent as ``initializationOptions.hints.style``)."""


def inlay_hints(
    data: FileData, lines: Sequence[str], digest: str, visible: types.Range, style: str = "full"
) -> list[dict[str, Any]]:
    """The hints for lines ``visible.start.line`` .. ``visible.end.line`` of a document, as the
    JSON objects LSP sends."""
    hints: list[dict[str, Any]] = json.loads(inlay_hints_json(data, lines, digest, visible, style))
    return hints


MEMO_RANGES = 8
"""How many serialized responses are kept per file and store version."""


def inlay_hints_json(
    data: FileData, lines: Sequence[str], digest: str, visible: types.Range, style: str = "full"
) -> str:
    """The JSON text of the response for lines ``visible.start.line`` .. ``visible.end.line``.

    Built from the store's rows without making :class:`Observation` objects or ``lsprotocol``
    objects (~20 µs a hint): each line's hints are serialized once per store version and
    document text, when a range first covers the line; the responses of the last few ranges
    asked are kept (an editor asks the same range again after each refresh, scroll back or
    focus).
    """
    if not data.by_line or is_stale(data, digest):
        return "[]"
    memo = data.memo.setdefault(("inlay_hints_json", digest, style), {})
    key = (visible.start.line, visible.end.line)
    text: Optional[str] = memo.get(key)
    if text is None:
        text = "[" + ",".join(_fragments(data, lines, digest, visible, style)) + "]"
        if len(memo) >= MEMO_RANGES:
            memo.pop(next(iter(memo)))
        memo[key] = text
    return text


def _fragments(
    data: FileData, lines: Sequence[str], digest: str, visible: types.Range, style: str
) -> list[str]:
    observed = data.memo.get(("observed_lines",))
    if observed is None:
        observed = data.memo[("observed_lines",)] = list(data.by_line.spans)
    built: dict[int, str] = data.memo.setdefault(("line_hints", digest, style), {})
    first = bisect.bisect_left(observed, visible.start.line + 1)
    last = bisect.bisect_right(observed, min(visible.end.line + 1, len(lines)))
    found = []
    for number in observed[first:last]:
        text = built.get(number)
        if text is None:
            text = built[number] = _line_json(data, lines, number, style)
        if text:
            found.append(text)
    return found


def _line_json(data: FileData, lines: Sequence[str], number: int, style: str = "full") -> str:
    """The hints of line ``number`` (1-based) as JSON objects joined by commas."""
    text = lines[number - 1].rstrip("\r\n")
    target = assignment_target(text)
    end = utf16_len(text.rstrip())
    by_name: dict[str, list[Row]] = {}
    for row in data.by_line.rows_of(number):
        by_name.setdefault(row[NAME], []).append(row)
    parts = []
    for rows in by_name.values():
        row = _representative(rows)
        col = row[COL]
        character = end if col is None else byte_col_to_utf16(text, int(col))
        hint = _row_text(row, style) + _disagreements(row, rows)
        name = row[NAME]
        if name != target and name:
            short = name if len(name) <= _MAX_NAME else name[: _MAX_NAME - 1] + "…"
            hint = f"{short}: {hint}"
        parts.append(
            f'{{"position":{{"line":{number - 1},"character":{character}}},'
            f'"label":{json.dumps(hint)},"kind":{_TYPE_KIND},"paddingLeft":true}}'
        )
    return ",".join(parts)


_TYPE_KIND = types.InlayHintKind.Type.value
MAX_DISAGREEING = 3
"""Processes whose differing value is spelled out in a hint; more are counted."""


def _representative(rows: list[Row]) -> Row:
    """The ``main`` process's row, else the first (the store orders processes by label)."""
    for row in rows:
        if row[PROCESS] == "main":
            return row
    return rows[0]


def _row_text(row: Row, style: str) -> str:
    """A row's hint: a module's or container's stored summary, else the tensor's shape (and,
    in the ``full`` style, dtype, device and grad state)."""
    if row[SUMMARY]:
        return str(row[SUMMARY])
    if style == "shape":
        return _shape(row[SHAPE_JSON])
    return _summary(
        row[SHAPE_JSON], row[DTYPE], row[DEVICE], bool(row[REQUIRES_GRAD] or row[GRAD_FN])
    )


def _disagreements(shown: Row, rows: list[Row]) -> str:
    """`` · rank 1: (31, 10)`` for each other process (rank, worker) that saw another shape,
    dtype or device on the line — only what differs, so a rank-dependent bug stands out."""
    notes = []
    for row in rows:
        if row is shown:
            continue
        differs = []
        if row[SUMMARY] or shown[SUMMARY]:  # a module or container: its whole summary
            if row[SUMMARY] != shown[SUMMARY]:
                notes.append(f"{row[PROCESS]}: {_row_text(row, 'full')}")
            continue
        if row[SHAPE_JSON] != shown[SHAPE_JSON]:
            differs.append(_shape(row[SHAPE_JSON]))
        if row[DTYPE] != shown[DTYPE]:
            differs.append(short_dtype(row[DTYPE]))
        if row[DEVICE] != shown[DEVICE]:
            differs.append(row[DEVICE])
        if differs:
            notes.append(f"{row[PROCESS]}: {' '.join(differs)}")
    if len(notes) > MAX_DISAGREEING:
        notes[MAX_DISAGREEING:] = [f"+{len(notes) - MAX_DISAGREEING} more"]
    return "".join(f" · {note}" for note in notes)


@functools.lru_cache(maxsize=4096)
def _shape(shape_json: str) -> str:
    """A row's shape as :func:`~tensor_dap.lsp.text.shape_text` writes it."""
    try:
        shape = tuple(int(d) for d in json.loads(shape_json))
    except (TypeError, ValueError):
        shape = ()
    return shape_text(shape)


@functools.lru_cache(maxsize=4096)
def _summary(shape_json: str, dtype: str, device: str, grad: bool) -> str:
    """:func:`~tensor_dap.lsp.text.summary` of a tensor row's columns."""
    text = f"{_shape(shape_json)} {short_dtype(dtype)} {device}"
    return f"{text} grad" if grad else text
