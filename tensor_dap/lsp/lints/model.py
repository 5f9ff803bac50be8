"""What a static lint is and what it finds: :class:`LintSpec` (the registry's entries),
:class:`Lint` (one finding) and :class:`Edit` (one piece of a quick fix).

Kept free of LSP types so that ``tensor-dap lint`` can run the lints without pygls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Optional

if TYPE_CHECKING:
    from .context import LintContext

SEVERITIES = ("error", "warning", "information", "hint")
"""The severities a lint may have, most severe first (LSP's order)."""


@dataclass(frozen=True)
class Edit:
    """Replace ``line:col`` .. ``end_line:end_col`` (1-based lines, byte columns) by ``text``."""

    line: int
    col: int
    end_line: int
    end_col: int
    text: str


@dataclass(frozen=True)
class Lint:
    """One static finding over ``line:col`` .. ``end_line:end_col``, with an optional fix.

    ``severity`` is the finding's own when its check knows better than the lint's default (a
    ``.data`` write in an init function is a hint); empty means the registry's default.
    """

    code: str
    message: str
    line: int
    col: int
    end_line: int
    end_col: int
    fix_title: Optional[str] = None
    edits: tuple[Edit, ...] = ()
    severity: str = ""


Check = Callable[["LintContext"], Iterator[Lint]]


@dataclass(frozen=True)
class LintSpec:
    """One lint of the registry: its code, default severity, a one-line description (for
    ``tensor-dap lint`` and the docs), its check, and the words a source must contain for the
    check to be worth running (a cheap filter on big files; ``a|b``: either)."""

    code: str
    severity: str
    description: str
    check: Check
    needs: tuple[str, ...] = ()

    def wanted(self, source: str) -> bool:
        return all(any(w in source for w in word.split("|")) for word in self.needs)
