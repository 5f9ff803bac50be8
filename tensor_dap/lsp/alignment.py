"""Match the lines of an edited document to the lines the run saw, so hints follow the code.

A run records each file's text beside its observations (the trace store's ``sources.text``).
When the open document differs from it, :func:`line_map` pairs every unchanged line of the
run's text with its line in the document (lines inserted above shift, lines edited or deleted
drop out), and :func:`aligned` rebuilds the file's data on the document's line numbers. Every
feature then reads data that describes the document as it is: a hint never sits on a line whose
text the run did not execute, and a hint on an untouched line survives an edit elsewhere.

Cost: common head and tail are skipped, the differing middle goes to :mod:`difflib` — typing in
one place of a 5,000-line file compares a few lines.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence
from typing import Optional

from .store import FileData, Lines

MEMO_KEY = "aligned"
"""Where :func:`aligned` keeps its result in ``FileData.memo`` (one document text at a time)."""


def _clean(line: str) -> str:
    return line.rstrip("\r\n")


def line_map(old: Sequence[str], new: Sequence[str]) -> dict[int, int]:
    """1-based line in ``old`` -> 1-based line in ``new``, for the lines left unchanged."""
    a = [_clean(line) for line in old]
    b = [_clean(line) for line in new]
    head = 0
    while head < len(a) and head < len(b) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < len(a) - head and tail < len(b) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    mapping = {i + 1: i + 1 for i in range(head)}
    middle_a, middle_b = a[head : len(a) - tail], b[head : len(b) - tail]
    if middle_a and middle_b:
        matcher = difflib.SequenceMatcher(None, middle_a, middle_b, autojunk=True)
        for block in matcher.get_matching_blocks():
            for k in range(block.size):
                mapping[head + block.a + k + 1] = head + block.b + k + 1
    shift = len(b) - len(a)
    for i in range(len(a) - tail, len(a)):
        mapping[i + 1] = i + shift + 1
    return mapping


def already_aligned(data: FileData, digest: str) -> Optional[FileData]:
    """``data`` for a document with text digest ``digest`` when no matching is needed (same
    text, no digest recorded, or matched for this text before); None when it is."""
    if data.digest is None or data.digest == digest:
        return data
    memo = data.memo.get(MEMO_KEY)
    return memo[1] if memo is not None and memo[0] == digest else None


def aligned(data: FileData, lines: Sequence[str], digest: str) -> FileData:
    """``data`` on the line numbers of a document with text ``lines`` and text digest ``digest``.

    The same object when the run saw this text (or recorded no digest); an empty
    :class:`FileData` but for the findings when the text differs and the run's text is unknown
    (a store written before texts were kept, or a huge file): no hint rather than a misplaced
    one, while a finding stays listed until the next run.
    Kept in ``data.memo`` for the last document text asked.
    """
    ready = already_aligned(data, digest)
    if ready is not None:
        return ready
    result = _realign(data, lines, digest)
    data.memo[MEMO_KEY] = (digest, result)
    return result


def _realign(data: FileData, lines: Sequence[str], digest: str) -> FileData:
    if data.source_text is None:
        return FileData((), data.findings, digest, data.by_line.path)
    mapping = line_map(data.source_text.splitlines(), lines)
    spans = {}
    for line, span in data.by_line.spans.items():  # in line order, and the map keeps the order
        moved_to = mapping.get(line)
        if moved_to is not None:
            spans[moved_to] = span
    by_line = Lines(data.by_line.rows, data.by_line.path, spans)
    findings = [
        dataclasses.replace(finding, line=mapping[finding.line])
        for finding in data.findings
        if finding.line in mapping
    ]
    return FileData((), findings, digest, data.by_line.path, data.source_text, by_line)
