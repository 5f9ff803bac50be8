"""``textDocument/codeAction``: quick fixes for the static lints and for runtime device mismatches.

Each static lint that carries edits (see :mod:`tensor_dap.lsp.static_lints`) becomes a
``quickfix`` action with a ``WorkspaceEdit`` when its range meets the requested one: add
``device=...`` to a CPU accumulator, add ``map_location="cpu"`` to ``torch.load``, insert
``optimizer.zero_grad()`` as the loop's first statement, write under ``torch.no_grad()`` instead
of through ``.data``; each lint also gets an "ignore this line" action adding a
``# tensor-dap: ignore[code]`` comment. A runtime ``device-mismatch`` finding whose CPU tensor was
made in this file by a factory call without ``device=`` (``torch.zeros(6)``) gets the same
``device=`` fix at the tensor's origin line, offered on the finding's line and on the origin line,
as long as the document's text is the one the run saw.
"""

from __future__ import annotations

import ast
import os
from typing import Any, Optional

from lsprotocol import types

from . import static_lints
from .diagnostics import lint_diagnostic
from .lints import ignore_edit
from .static_lints import Edit, Lint
from .store import FileData
from .text import byte_col_to_utf16, line_at


def position(lines: list[str], line: int, col: int) -> types.Position:
    """The LSP position of ``ast`` line ``line`` (1-based), UTF-8 byte column ``col``."""
    text = line_at(lines, line - 1) or ""
    return types.Position(line=line - 1, character=byte_col_to_utf16(text, col))


def text_edit(lines: list[str], edit: Edit) -> types.TextEdit:
    return types.TextEdit(
        range=types.Range(
            start=position(lines, edit.line, edit.col),
            end=position(lines, edit.end_line, edit.end_col),
        ),
        new_text=edit.text,
    )


def _meets(first: int, last: int, requested: types.Range) -> bool:
    """Whether 0-based lines ``first`` .. ``last`` meet the requested range's lines."""
    return first <= requested.end.line and requested.start.line <= last


def action(
    uri: str,
    lines: list[str],
    title: str,
    edits: tuple[Edit, ...],
    diagnostic: Optional[types.Diagnostic],
) -> types.CodeAction:
    return types.CodeAction(
        title=title,
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[diagnostic] if diagnostic is not None else None,
        is_preferred=True,
        edit=types.WorkspaceEdit(changes={uri: [text_edit(lines, e) for e in edits]}),
    )


def ignore_action(
    uri: str, lines: list[str], lint: Lint, diagnostic: types.Diagnostic
) -> types.CodeAction:
    """ "Ignore this line": the lint's code added as a ``# tensor-dap: ignore[code]`` comment."""
    ignore = action(
        uri, lines, f"Ignore `{lint.code}` on this line", (ignore_edit(lint, lines),), diagnostic
    )
    ignore.is_preferred = None
    return ignore


def code_actions(
    uri: str,
    path: Optional[str],
    lines: list[str],
    tree: Optional[ast.Module],
    lints: list[Lint],
    data: FileData,
    stale: bool,
    requested: types.Range,
    runtime: list[types.Diagnostic],
) -> list[types.CodeAction]:
    """The quick fixes for ``requested`` in a document (``runtime``: its published findings)."""
    found = []
    for lint in lints:
        if not _meets(lint.line - 1, lint.end_line - 1, requested):
            continue
        shown = lint_diagnostic(lint, lines)
        if lint.edits and lint.fix_title:
            found.append(action(uri, lines, lint.fix_title, lint.edits, shown))
        found.append(ignore_action(uri, lines, lint, shown))
    if tree is None or stale or not path:
        return found
    device = static_lints.device_expression(tree)
    offered: set[int] = set()
    for finding in data.findings:
        if finding.rule != "device-mismatch":
            continue
        diagnostic = next((d for d in runtime if d.range.start.line == finding.line - 1), None)
        for tensor in finding.tensors:
            origin = tensor.get("origin") if isinstance(tensor, dict) else None
            if tensor.get("device") != "cpu" or not isinstance(origin, dict):
                continue
            line = origin.get("line")
            if not isinstance(line, int) or line in offered or not _same_file(origin, path):
                continue
            if not (
                _meets(line - 1, line - 1, requested)
                or _meets(finding.line - 1, finding.line - 1, requested)
            ):
                continue
            call = _factory_on_line(tree, line)
            if call is None:
                continue
            offered.add(line)
            title, edits = static_lints.device_fix(call, device)
            name = tensor.get("name") or "the tensor"
            title = title.replace("Create it", f"Create {name}", 1)
            found.append(action(uri, lines, title, edits, diagnostic))
    return found


def _same_file(origin: dict[str, Any], path: str) -> bool:
    where = str(origin.get("path") or "")
    return where == path or os.path.realpath(where) == os.path.realpath(path)


def _factory_on_line(tree: ast.Module, line: int) -> Optional[ast.Call]:
    """The first ``torch`` factory call without ``device=`` that starts on ``line``."""
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and node.lineno == line]
    for call in sorted(calls, key=lambda c: c.col_offset):
        found = static_lints.factory_without_device(call)
        if found is not None and found.lineno == line:
            return found
    return None
