"""Where trace lines go and what they look like.

One formatter per kind of line, PySnooper's layout without timestamps (so output is stable and
easy to parse): ``line 7    y.masked_scatter_(mask, x)``, ``New var:....... y = tensor<...>``,
``!! device-mismatch: ...``, ``... line 12 ran 10000 times (shape stable)``.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any, Callable, Optional, Union

Output = Union[None, str, "os.PathLike[str]", IO[str], Callable[[str], Any]]

INDENT = "    "
LABELS = {
    "start": "Starting var:..",
    "new": "New var:.......",
    "modified": "Modified var:..",
    "return": "Return value:..",
    "exception": "Exception:.....",
}


class Sink:
    """Writes whole lines to stderr (default), a path, a file-like object or a callable."""

    def __init__(self, output: Output = None, append: bool = True) -> None:
        self._file: Optional[IO[str]] = None
        self._owned = False
        self._call: Optional[Callable[[str], Any]] = None
        if output is None:
            self._call = lambda text: sys.stderr.write(text)
        elif isinstance(output, (str, os.PathLike)):
            self._file = open(output, "a" if append else "w", encoding="utf-8")  # noqa: SIM115
            self._owned = True
        elif hasattr(output, "write"):
            self._file = output  # type: ignore[assignment]
        elif callable(output):
            self._call = output
        else:
            raise TypeError(f"output must be a path, a file or a callable, not {output!r}")
        self._callable_sink = self._call is not None and output is not None

    def line(self, text: str) -> None:
        try:
            if self._file is not None:
                self._file.write(text + "\n")
            elif self._callable_sink:
                assert self._call is not None
                self._call(text)  # a callable gets the line without its newline (PySnooper)
            else:
                assert self._call is not None
                self._call(text + "\n")
        except Exception:
            pass  # the trace never breaks the program

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.flush()
                if self._owned:
                    self._file.close()
            except Exception:
                pass


def event_line(depth: int, event: str, lineno: int, source: str) -> str:
    return f"{INDENT * depth}{event:<9} {lineno:<4} {source}"


def value_line(depth: int, kind: str, name: Optional[str], text: str) -> str:
    named = f"{name} = " if name is not None else ""
    return f"{INDENT * depth}{LABELS[kind]} {named}{text}"


def finding_line(depth: int, rule: str, message: str, where: str = "") -> str:
    suffix = f" (at {where})" if where else ""
    return f"{INDENT * depth}!! {rule}: {message}{suffix}"


def summary_line(depth: int, lineno: int, runs: int, shape_changes: int, where: str = "") -> str:
    if shape_changes:
        how = f"shape changed {shape_changes} time{'s' if shape_changes != 1 else ''}"
    else:
        how = "shape stable"
    at = f"{where} " if where else ""
    return f"{INDENT * depth}... {at}line {lineno} ran {runs} times ({how})"
