"""``textDocument/codeAction``: quick fixes for the static lints and for runtime device mismatches.

Each static lint that carries edits (see :mod:`tensor_dap.lsp.lints`) becomes a
``quickfix`` action with a ``WorkspaceEdit`` when its range meets the requested one: add
``device=...`` to a CPU accumulator, add ``map_location="cpu"`` to ``torch.load``, insert
``optimizer.zero_grad()`` as the loop's first statement, write under ``torch.no_grad()`` instead
of through ``.data``; each lint also gets an "ignore this line" action adding a
``# tensor-dap: ignore[code]`` comment. A runtime finding of a rule the catalogue marks
``fix_device_at_origin`` (``device-mismatch``) whose CPU tensor was made in this file by a factory
call without ``device=`` (``torch.zeros(6)``) gets the same ``device=`` fix at the tensor's origin
line, offered on the finding's line and on the origin line, as long as the document's text is the
one the run saw.
"""

from __future__ import annotations

import ast
import os
from typing import Optional, Sequence

from lsprotocol import types

from tensor_dap import catalog
from tensor_dap.device_fix import device_in_fix, device_variable
from tensor_dap.findings import Finding, TensorInfo

from .diagnostics import lint_diagnostic
from .lints import Edit, Lint, device_fix, factory_without_device, ignore_edit
from .store import FileData
from .text import byte_col_to_utf16, line_at


def position(lines: Sequence[str], line: int, col: int) -> types.Position:
    """The LSP position of ``ast`` line ``line`` (1-based), UTF-8 byte column ``col``."""
    text = line_at(lines, line - 1) or ""
    return types.Position(line=line - 1, character=byte_col_to_utf16(text, col))


def text_edit(lines: Sequence[str], edit: Edit) -> types.TextEdit:
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
    lines: Sequence[str],
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
    uri: str, lines: Sequence[str], lint: Lint, diagnostic: types.Diagnostic
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
    lines: Sequence[str],
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
    variable = device_variable(ast.walk(tree))
    offered: set[int] = set()
    for finding in data.findings:
        if not fixes_device_at_origin(finding):
            continue
        diagnostic = next((d for d in runtime if d.range.start.line == finding.line - 1), None)
        for tensor in finding.tensors:
            origin = tensor.origin
            if tensor.device != "cpu" or origin is None:
                continue
            line = origin.line
            if line in offered or not _same_file(origin.path, path):
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
            device = device_in_fix(_accelerator(finding.tensors), variable=variable)
            title, edits = device_fix(call, device)
            title = title.replace("Create it", f"Create {tensor.name or 'the tensor'}", 1)
            found.append(action(uri, lines, title, edits, diagnostic))
    return found


def _accelerator(tensors: Sequence[TensorInfo]) -> str:
    """The device of the finding's tensor that is not on the CPU (``cuda:0``)."""
    for tensor in tensors:
        if tensor.device and tensor.device != "cpu":
            return tensor.device
    return "cuda"


def fixes_device_at_origin(finding: Finding) -> bool:
    """Whether the finding's rule is fixed where its CPU tensors were made (the catalogue's
    ``fix_device_at_origin``)."""
    rule = catalog.find(finding.rule)
    return rule is not None and rule.fix_device_at_origin


def _same_file(where: str, path: str) -> bool:
    return where == path or os.path.realpath(where) == os.path.realpath(path)


def _factory_on_line(tree: ast.Module, line: int) -> Optional[ast.Call]:
    """The first ``torch`` factory call without ``device=`` that starts on ``line``."""
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and node.lineno == line]
    for call in sorted(calls, key=lambda c: c.col_offset):
        found = factory_without_device(call)
        if found is not None and found.lineno == line:
            return found
    return None
