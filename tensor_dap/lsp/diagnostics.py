"""``textDocument/publishDiagnostics``: the findings of the last run, at their lines.

Each finding of the latest run that observed the file becomes a Warning over the line's text
(without indentation and trailing blanks), ``source`` ``tensor-dap``, ``code`` the rule id, and
related information at the line where each named tensor was created. Findings are published for
open documents on open, change and save, and again whenever the trace store changes (the server
polls it). After an edit a finding follows its line; editing the line itself (the fix) removes it.

The static lints of :mod:`tensor_dap.lsp.static_lints` (no run needed) are published with them,
over the flagged expression, ``source`` ``tensor-dap`` and ``code`` the lint's; a lint is left
out where the run found the same rule on the same line.
"""

from __future__ import annotations

from typing import Sequence

from lsprotocol import types
from pygls.uris import from_fs_path

from tensor_dap.findings import Finding

from .static_lints import LOAD_WITHOUT_MAP_LOCATION, Lint
from .store import FileData
from .text import byte_col_to_utf16, line_at, utf16_len

SOURCE = "tensor-dap"


def line_range(lines: Sequence[str], index: int) -> types.Range:
    """The range of line ``index``'s text without indentation and trailing blanks."""
    text = lines[index].rstrip("\r\n") if 0 <= index < len(lines) else ""
    body = text.rstrip()
    start = utf16_len(body) - utf16_len(body.lstrip())
    return types.Range(
        start=types.Position(line=index, character=start),
        end=types.Position(line=index, character=utf16_len(body)),
    )


def related(finding: Finding) -> list[types.DiagnosticRelatedInformation]:
    """Where each tensor named in the finding was created, when the run knew."""
    found = []
    for tensor in finding.tensors:
        origin = tensor.origin
        if origin is None or not origin.path or not origin.line:
            continue
        where = types.Position(line=max(origin.line - 1, 0), character=0)
        op = f" by {origin.op}" if origin.op else ""
        found.append(
            types.DiagnosticRelatedInformation(
                location=types.Location(
                    uri=from_fs_path(origin.path) or origin.path,
                    range=types.Range(start=where, end=where),
                ),
                message=f"{tensor.name or 'tensor'} created here{op}",
            )
        )
    return found


def lint_diagnostic(lint: Lint, lines: Sequence[str]) -> types.Diagnostic:
    """The diagnostic of a static lint (``ast`` positions made LSP's)."""
    start = line_at(lines, lint.line - 1) or ""
    end = line_at(lines, lint.end_line - 1) or ""
    severity = types.DiagnosticSeverity.Warning
    if lint.code == LOAD_WITHOUT_MAP_LOCATION:
        severity = types.DiagnosticSeverity.Information
    return types.Diagnostic(
        range=types.Range(
            start=types.Position(line=lint.line - 1, character=byte_col_to_utf16(start, lint.col)),
            end=types.Position(
                line=lint.end_line - 1, character=byte_col_to_utf16(end, lint.end_col)
            ),
        ),
        message=lint.message,
        severity=severity,
        source=SOURCE,
        code=lint.code,
    )


def diagnostics(
    data: FileData, lines: Sequence[str], lints: Sequence[Lint] = ()
) -> list[types.Diagnostic]:
    """The diagnostics for a document with text ``lines``: the run's findings, then the
    static lints."""
    found = []
    for finding in data.findings:
        index = min(max(finding.line - 1, 0), max(len(lines) - 1, 0))
        message = f"{finding.message} ({finding.tag})" if finding.tag else finding.message
        found.append(
            types.Diagnostic(
                range=line_range(lines, index),
                message=message,
                severity=types.DiagnosticSeverity.Warning,
                source=SOURCE,
                code=finding.rule,
                related_information=related(finding) or None,
            )
        )
    seen = {(f.rule, f.line) for f in data.findings}
    found.extend(lint_diagnostic(x, lines) for x in lints if (x.code, x.line) not in seen)
    return found
