"""``textDocument/inlayHint``: the shape, dtype, device and grad state a run saw, after the code.

For each line of the requested range with observations in the trace store, one hint per observed
name, at the end of the statement (the stored ``col``, else the end of the line's text without
trailing blanks): ``(64, 10) f32 cuda:0 grad``. A name other than the line's assignment target
(``y.add_(1)``, a second value on the line) is prefixed: ``y: (6,) f32 cpu``. With several
processes (ranks, workers) the ``main`` process's value is shown, else the first one's; the hover
lists them all.

The response is sent as JSON text built once per range, store version and document text
(:func:`inlay_hints_json`), past pygls's converter.

Stale hints: when the document's text digest differs from the digest the run recorded for the
file, the document gets no hints at all (line-by-line matching is left for later): a hint never
describes code the run did not execute.
"""

from __future__ import annotations

import bisect
import json
import re
from typing import Any, Optional

from lsprotocol import types

from tensor_dap.trace import Observation

from .store import FileData
from .text import byte_col_to_utf16, summary, utf16_len

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


def inlay_hints(
    data: FileData, lines: list[str], digest: str, visible: types.Range
) -> list[dict[str, Any]]:
    """The hints for lines ``visible.start.line`` .. ``visible.end.line`` of a document.

    The hints of the whole document are built once per store version and document text, as the
    JSON objects LSP sends (building and serializing ``lsprotocol`` objects costs ~20 µs a hint);
    a request then only cuts out its range.
    """
    if not data.by_line or is_stale(data, digest):
        return []
    key = ("inlay_hints", digest)
    built = data.memo.get(key)
    if built is None:
        built = data.memo[key] = _build(data, lines)
    starts, hints = built
    first = bisect.bisect_left(starts, visible.start.line)
    last = bisect.bisect_right(starts, visible.end.line)
    return hints[first:last]


MEMO_RANGES = 8
"""How many serialized responses are kept per file and store version."""


def inlay_hints_json(data: FileData, lines: list[str], digest: str, visible: types.Range) -> str:
    """:func:`inlay_hints` as the JSON text of the response, kept for the last few ranges asked
    (an editor asks the same range again after each refresh, scroll back or focus)."""
    if not data.by_line or is_stale(data, digest):
        return "[]"
    memo = data.memo.setdefault(("inlay_hints_json", digest), {})
    key = (visible.start.line, visible.end.line)
    text = memo.get(key)
    if text is None:
        text = json.dumps(inlay_hints(data, lines, digest, visible), separators=(",", ":"))
        if len(memo) >= MEMO_RANGES:
            memo.pop(next(iter(memo)))
        memo[key] = text
    return text


def _build(data: FileData, lines: list[str]) -> tuple[list[int], list[dict[str, Any]]]:
    starts: list[int] = []
    hints: list[dict[str, Any]] = []
    for number in sorted(data.by_line):
        if number > len(lines):
            break
        text = lines[number - 1].rstrip("\r\n")
        target = assignment_target(text)
        end = utf16_len(text.rstrip())
        for obs in representatives(data.by_line[number]):
            character = end if obs.col is None else byte_col_to_utf16(text, obs.col)
            starts.append(number - 1)
            hints.append(
                {
                    "position": {"line": number - 1, "character": character},
                    "label": label(obs, target),
                    "kind": types.InlayHintKind.Type.value,
                    "paddingLeft": True,
                }
            )
    return starts, hints
