"""``textDocument/inlineValue`` (LSP 3.17): what the last run saw, for editors that ask while
debugging.

Each observed line of the requested range gets one ``InlineValueText`` per observed name over the
line's text (without indentation), ``y: (6,) f32 cpu``, with the same choice of process as the
inlay hints. Lines edited since the run get none (see :mod:`tensor_dap.lsp.alignment`).
"""

from __future__ import annotations

from typing import Sequence

from lsprotocol import types

from .diagnostics import line_range
from .inlay_hints import is_stale, representatives
from .store import FileData
from .text import summary


def inline_values(
    data: FileData, lines: Sequence[str], digest: str, requested: types.Range
) -> list[types.InlineValueText]:
    if not data.by_line or is_stale(data, digest):
        return []
    found = []
    first, last = requested.start.line + 1, min(requested.end.line + 1, len(lines))
    for number in range(first, last + 1):
        observations = data.by_line.get(number)
        if not observations:
            continue
        where = line_range(lines, number - 1)
        for obs in representatives(observations):
            found.append(types.InlineValueText(range=where, text=f"{obs.name}: {summary(obs)}"))
    return found
