"""Parse trace output into structured entries, so tests compare meaning, not layout."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

_EVENT = re.compile(r"^(\s*)(call|line|return|exception)\s+(\d+)\s+(.*)$")
_VALUE = re.compile(r"^(\s*)(Starting var|New var|Modified var|Return value|Exception):\.+ (.*)$")
_FINDING = re.compile(r"^(\s*)!! ([a-z-]+): (.*)$")
_SUMMARY = re.compile(r"^(\s*)\.\.\. (?:(\S+) )?line (\d+) ran (\d+) times \((.*)\)$")
_KINDS = {
    "Starting var": "start",
    "New var": "new",
    "Modified var": "modified",
    "Return value": "return",
    "Exception": "exception",
}


class Entry(NamedTuple):
    """``kind``: call/line/return/exception (events), start/new/modified/return-value/
    exception-value (values), finding, summary. ``name``: line number, variable or rule id."""

    kind: str
    name: str
    value: str
    depth: int


def parse(text: str) -> list[Entry]:
    entries = []
    for raw in text.splitlines():
        entry = parse_line(raw)
        if entry is not None:
            entries.append(entry)
    return entries


def parse_line(raw: str) -> Optional[Entry]:
    match = _EVENT.match(raw)
    if match:
        indent, event, line, source = match.groups()
        return Entry(event, line, source, len(indent) // 4)
    match = _VALUE.match(raw)
    if match:
        indent, label, rest = match.groups()
        kind = _KINDS[label]
        if kind in ("return", "exception"):
            return Entry(f"{kind}-value", "", rest, len(indent) // 4)
        name, _, value = rest.partition(" = ")
        return Entry(kind, name, value, len(indent) // 4)
    match = _FINDING.match(raw)
    if match:
        indent, rule, message = match.groups()
        return Entry("finding", rule, message, len(indent) // 4)
    match = _SUMMARY.match(raw)
    if match:
        indent, _where, line, runs, how = match.groups()
        return Entry("summary", line, f"{runs} {how}", len(indent) // 4)
    return None


def after_line(entries: list[Entry], source: str) -> list[Entry]:
    """The entries following the first ``line`` event whose source starts with ``source``,
    up to the next event."""
    for index, entry in enumerate(entries):
        if entry.kind == "line" and entry.value.startswith(source):
            following = []
            for later in entries[index + 1 :]:
                if later.kind in ("call", "line", "return", "exception"):
                    break
                following.append(later)
            return following
    raise AssertionError(f"no line {source!r} in the trace")
