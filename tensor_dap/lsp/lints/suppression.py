"""``# tensor-dap: ignore[code]`` comments: a lint on a line carrying one (for its code, or a
bare ``# tensor-dap: ignore`` for every code) is left out, in the editor and in
``tensor-dap lint``; and the edit that adds such a comment (the editor's "ignore this line").

A lint is silenced by a comment on the line where it starts or the line where it ends (the last
line of a statement over several lines)."""

from __future__ import annotations

import re
from typing import Optional, Sequence

from .model import Edit, Lint

_IGNORE = re.compile(r"#\s*tensor-dap:\s*ignore(?:\[([^\]]*)\])?")


def ignored_codes(line: str) -> Optional[set[str]]:
    """The codes a line's ignore comment names: None without one, an empty set for a bare
    ``# tensor-dap: ignore`` (every code)."""
    if "tensor-dap" not in line:
        return None
    match = _IGNORE.search(line)
    if match is None:
        return None
    if match.group(1) is None:
        return set()
    return {code.strip() for code in match.group(1).split(",") if code.strip()}


def is_ignored(found: Lint, lines: list[str]) -> bool:
    """Whether a comment on ``found``'s first or last line silences it."""
    for number in {found.line, found.end_line}:
        if 0 < number <= len(lines):
            codes = ignored_codes(lines[number - 1])
            if codes is not None and (not codes or found.code in codes):
                return True
    return False


def ignore_edit(found: Lint, lines: Sequence[str]) -> Edit:
    """The edit silencing ``found``: its code added to the ignore comment on its first line,
    else ``  # tensor-dap: ignore[code]`` appended to that line."""
    text = lines[found.line - 1] if 0 < found.line <= len(lines) else ""
    match = _IGNORE.search(text) if "tensor-dap" in text else None
    if match is not None and match.group(1) is not None:
        inner_end = len(text[: match.end(1)].encode("utf-8"))
        separator = ", " if match.group(1).strip() else ""
        return Edit(found.line, inner_end, found.line, inner_end, f"{separator}{found.code}")
    end = len(text.rstrip().encode("utf-8"))
    return Edit(found.line, end, found.line, end, f"  # tensor-dap: ignore[{found.code}]")
