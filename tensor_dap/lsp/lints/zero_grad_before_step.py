"""``zero-grad-before-step``: ``zero_grad()`` between ``backward()`` and ``step()`` in one
block: the step sees zero gradients (or none), so the model never learns."""

from __future__ import annotations

import ast
from typing import Iterator, Optional

from .ast_helpers import method_call, span
from .context import LintContext, walk_scope
from .missing_zero_grad import optimizer_of
from .model import Edit, Lint, LintSpec

CODE = "zero-grad-before-step"


def _event(statement: ast.stmt) -> Optional[tuple[str, Optional[str]]]:
    """What a statement does to gradients: ``("zero", receiver)`` for a ``x.zero_grad()``
    statement, ``("step", optimizer)``, ``("backward", None)``; None for anything else."""
    if isinstance(statement, ast.Expr):
        call = method_call(statement.value, "zero_grad")
        if call is not None:
            assert isinstance(call.func, ast.Attribute)
            return "zero", ast.unparse(call.func.value)
    nodes = list(walk_scope(statement))
    if any(method_call(n, "backward") for n in nodes):
        return "backward", None
    for node in nodes:
        optimizer = optimizer_of(node) if isinstance(node, ast.Call) else None
        if optimizer is not None:
            return "step", optimizer
    return None


def _blocks(context: LintContext) -> Iterator[list[ast.stmt]]:
    for node in context.nodes:
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def check(context: LintContext) -> Iterator[Lint]:
    for block in _blocks(context):
        events = [(s, _event(s)) for s in block]
        happened = [(s, e) for s, e in events if e is not None]
        for index, (statement, event) in enumerate(happened):
            if event[0] != "zero" or index == 0 or index + 1 >= len(happened):
                continue
            before, after = happened[index - 1][1], happened[index + 1]
            if before[0] != "backward" or after[1][0] != "step":
                continue
            zeroed, stepped = event[1] or "", after[1][1] or ""
            if zeroed != stepped and "opt" in zeroed.lower():
                continue  # another optimizer's gradients
            title, edits = _move_fix(context, statement, after[0])
            yield Lint(
                CODE,
                f"`{zeroed}.zero_grad()` runs after `backward()` and before `{stepped}.step()`: "
                "the step sees the gradients just zeroed, so nothing is learned. Zero the "
                "gradients before `backward()` or after `step()`.",
                *span(statement),
                fix_title=title,
                edits=edits,
            )


def _alone(context: LintContext, node: ast.stmt) -> bool:
    """Whether ``node`` is a one-line expression statement with its line to itself (a comment
    after it aside)."""
    line = context.line_bytes(node.lineno)
    rest = line[node.end_col_offset or 0 :].strip()
    return (
        isinstance(node, ast.Expr)
        and node.end_lineno == node.lineno
        and not line[: node.col_offset].strip()
        and (not rest or rest.startswith(b"#"))
    )


def _move_fix(
    context: LintContext, statement: ast.stmt, step: ast.stmt
) -> tuple[Optional[str], tuple[Edit, ...]]:
    """Move the ``zero_grad()`` line below the step's, when both have their lines to
    themselves."""
    if not (_alone(context, statement) and _alone(context, step)):
        return None, ()
    text = context.line_bytes(statement.lineno).decode("utf-8", errors="replace")
    below = step.lineno + 1
    if below > len(context.lines):
        end = len(context.line_bytes(step.lineno))
        insert = Edit(step.lineno, end, step.lineno, end, "\n" + text)
    else:
        insert = Edit(below, 0, below, 0, text + "\n")
    remove = Edit(statement.lineno, 0, statement.lineno + 1, 0, "")
    return "Move `zero_grad()` after the step", (remove, insert)


SPEC = LintSpec(
    CODE,
    "warning",
    "`zero_grad()` between `backward()` and `step()`",
    check,
    needs=("zero_grad", "backward", "step"),
)
