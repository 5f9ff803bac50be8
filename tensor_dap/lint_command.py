"""``tensor-dap lint [PATH...]``: the language server's static lints without an editor, for CI.

One line per finding, ``path:line:col code message`` (1-based line and character column), or
``--format json``. Directories are walked for ``*.py`` (hidden folders, virtual environments and
``__pycache__`` skipped). Hints (a ``.data`` write in an init function, ``torch.load`` without
``map_location``) are left out unless ``--severity hint``. A file that does not parse is named
on stderr and skipped. Exit status: 1 when something is reported, 0 when clean, 2 on usage
errors (a path that does not exist). Reads no torch.
"""

from __future__ import annotations

import ast
import json
import os
import tokenize
from pathlib import Path
from typing import Any, Iterator, Optional, TextIO

from tensor_dap.lsp.lints import MAX_SOURCE, SEVERITIES, Lint, lint, severity

USAGE_ERROR = 2
FOUND = 1
_SKIPPED_FOLDERS = {"__pycache__", "node_modules", "site-packages", "venv", "env"}


class LintUsageError(Exception):
    """A path that cannot be linted; the command says so in one line and exits 2."""


def python_files(paths: list[str]) -> list[Path]:
    """The files to lint: each file named, and the ``*.py`` under each folder, in order."""
    found: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found.extend(sorted(_walk(path)))
        elif path.is_file():
            found.append(path)
        else:
            raise LintUsageError(f"no such file or directory: {name}")
    return found


def _walk(folder: Path) -> Iterator[Path]:
    for root, folders, files in os.walk(folder):
        folders[:] = [f for f in folders if not f.startswith(".") and f not in _SKIPPED_FOLDERS]
        yield from (Path(root) / f for f in files if f.endswith(".py"))


def _column(line: str, col: int) -> int:
    """The 1-based character column of UTF-8 byte column ``col`` in ``line``."""
    return len(line.encode("utf-8")[:col].decode("utf-8", errors="replace")) + 1


def _record(path: Path, lines: list[str], found: Lint) -> dict[str, Any]:
    start = lines[found.line - 1] if 0 < found.line <= len(lines) else ""
    end = lines[found.end_line - 1] if 0 < found.end_line <= len(lines) else ""
    return {
        "path": str(path),
        "line": found.line,
        "column": _column(start, found.col),
        "end_line": found.end_line,
        "end_column": _column(end, found.end_col),
        "code": found.code,
        "severity": severity(found),
        "message": found.message,
        "fix": found.fix_title,
    }


def _parsed(path: Path, source: str, err: TextIO) -> Optional[ast.Module]:
    """The file's tree; None, with one line on ``err``, for a file that cannot be linted."""
    if len(source) > MAX_SOURCE:
        err.write(f"tensor-dap lint: {path}: not linted (over {MAX_SOURCE} characters)\n")
        return None
    try:
        return ast.parse(source)
    except SyntaxError as error:
        err.write(f"tensor-dap lint: {path}:{error.lineno}: not linted: {error.msg}\n")
    except (ValueError, RecursionError, MemoryError) as error:
        err.write(f"tensor-dap lint: {path}: not linted: {error}\n")
    return None


def run_lint(
    paths: list[str], out: TextIO, err: TextIO, as_json: bool = False, least: str = "information"
) -> int:
    """Lint ``paths`` (``.`` when empty), writing the findings of severity ``least`` or worse
    to ``out``; returns the exit status."""
    try:
        files = python_files(paths or ["."])
    except LintUsageError as error:
        err.write(f"tensor-dap lint: {error}\n")
        return USAGE_ERROR
    shown = set(SEVERITIES[: SEVERITIES.index(least) + 1])
    records: list[dict[str, Any]] = []
    for path in files:
        try:
            with tokenize.open(path) as handle:
                source = handle.read()
        except (OSError, SyntaxError, UnicodeDecodeError) as error:
            err.write(f"tensor-dap lint: cannot read {path}: {error}\n")
            continue
        tree = _parsed(path, source, err)
        if tree is None:
            continue
        lines = source.splitlines()
        records.extend(_record(path, lines, f) for f in lint(source, tree) if severity(f) in shown)
    if as_json:
        json.dump({"files": len(files), "findings": records}, out, indent=2)
        out.write("\n")
    else:
        for record in records:
            out.write(
                f"{record['path']}:{record['line']}:{record['column']} "
                f"{record['code']} {record['message']}\n"
            )
    return FOUND if records else 0
