"""The source text the trace prints beside a line number, and the line a call is shown at.

A decorated function's code starts at its first decorator (``co_firstlineno``), and that is the
line the interpreter reports when a call starts; the trace shows the ``def`` instead, as the
user reads the function, so ``@tensor_dap.snoop()`` never appears as the line that was called.
"""

from __future__ import annotations

import linecache
import re
from types import CodeType

_DEFINITION = re.compile(r"\s*(?:async\s+def|def|class)\s")
_DECORATOR_LINES = 50
"""How far below the first decorator the ``def`` is looked for (decorators span lines)."""
_DEFINITION_LINES: dict[CodeType, int] = {}


def source_text(code: CodeType, line: int) -> str:
    """Line ``line`` of ``code``'s file, stripped; empty when the source is unavailable."""
    return linecache.getline(code.co_filename, line).strip()


def definition_line(code: CodeType) -> int:
    """The ``def`` (or ``class``) line of a function's code, below its decorators; the first
    line for any other code (cached per code object: it runs on every traced call)."""
    found = _DEFINITION_LINES.get(code)
    if found is None:
        found = _DEFINITION_LINES[code] = _find_definition(code)
    return found


def _find_definition(code: CodeType) -> int:
    first = code.co_firstlineno
    path = code.co_filename
    if not linecache.getline(path, first).lstrip().startswith("@"):
        return first
    for line in range(first + 1, first + _DECORATOR_LINES):
        text = linecache.getline(path, line)
        if not text:
            break
        if _DEFINITION.match(text):
            return line
    return first
