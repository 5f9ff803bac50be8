"""``data-write``: ``p.data = ...``, ``p.data -= ...``, ``p.data.add_(...)`` outside
``torch.no_grad()`` (``p.grad.data`` and reads like ``p.data.clone()`` are fine)."""

from __future__ import annotations

import ast
from typing import Iterator, Optional

from .ast_helpers import span
from .context import LintContext
from .model import Edit, Lint, LintSpec

CODE = "data-write"


def _data_of(node: ast.AST) -> Optional[ast.Attribute]:
    """``<p>.data`` where ``p`` is not a ``.grad`` -> the attribute node, else None."""
    if isinstance(node, ast.Attribute) and node.attr == "data":
        receiver = node.value
        if isinstance(receiver, ast.Attribute) and receiver.attr == "grad":
            return None
        return node
    return None


def check(context: LintContext) -> Iterator[Lint]:
    for node in context.nodes:
        data: Optional[ast.Attribute] = None
        statement: Optional[ast.stmt] = None
        new_text: Optional[str] = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            data = _data_of(node.targets[0])
            if data is not None:
                receiver = context.segment(data.value)
                statement, new_text = node, f"{receiver}.copy_({context.segment(node.value)})"
        elif isinstance(node, ast.AugAssign):
            data = _data_of(node.target)
            statement = node if data is not None else None
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr.endswith("_")
                and not func.attr.endswith("__")
            ):
                data = _data_of(func.value)
                statement = node if data is not None else None
        if data is None or statement is None or context.in_no_grad(statement):
            continue
        title, edits = _no_grad_fix(context, statement, data, new_text)
        yield Lint(
            CODE,
            f"`{ast.unparse(data)}` writes bypass autograd: the change is invisible to its "
            "version counter, so a backward through saved values may silently use wrong "
            "numbers. Write under `with torch.no_grad():` to the tensor itself.",
            *span(statement),
            fix_title=title,
            edits=edits,
        )


def _no_grad_fix(
    context: LintContext, statement: ast.stmt, data: ast.Attribute, new_text: Optional[str]
) -> tuple[Optional[str], tuple[Edit, ...]]:
    """``p.data.add_(x)`` -> ``with torch.no_grad():`` + ``p.add_(x)`` (one-line statements
    that start a line)."""
    line = context.line_bytes(statement.lineno)
    if (
        (statement.end_lineno or 0) != statement.lineno
        or line[: statement.col_offset].strip()
        or "\n" in (new_text or "")
    ):
        return None, ()
    if new_text is None:  # the statement's own text without ``.data``
        cut, rest = data.value.end_col_offset or 0, data.end_col_offset or 0
        new_text = (
            line[statement.col_offset : cut] + line[rest : statement.end_col_offset]
        ).decode("utf-8", errors="replace")
    indent = " " * statement.col_offset
    replacement = f"with torch.no_grad():\n{indent}    {new_text}"
    first, col, _, end = span(statement)
    return "Write under `torch.no_grad()` instead of through `.data`", (
        Edit(first, col, first, end, replacement),
    )


SPEC = LintSpec(
    CODE,
    "warning",
    "a write through `.data` outside `torch.no_grad()`",
    check,
    needs=(".data",),
)
