"""``leaf-rebound``: a tensor made with ``requires_grad=True`` rebound by ``w = w - ...`` outside
``torch.no_grad()``."""

from __future__ import annotations

import ast
from typing import Iterator

from .ast_helpers import method_call, span
from .context import LintContext, walk_scope
from .model import Lint, LintSpec

CODE = "leaf-rebound"


def requires_grad_leaf(value: ast.AST) -> bool:
    """``torch.randn(..., requires_grad=True)`` or ``torch.randn(...).requires_grad_()``."""
    if not isinstance(value, ast.Call):
        return False
    if any(
        k.arg == "requires_grad" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in value.keywords
    ):
        return True
    call = method_call(value, "requires_grad_")
    return call is not None and not (
        call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value is False
    )


def check(context: LintContext) -> Iterator[Lint]:
    for body in context.scopes():
        leaves: dict[str, int] = {}
        for node in sorted(
            (n for n in walk_scope(body) if isinstance(n, ast.Assign)),
            key=lambda n: (n.lineno, n.col_offset),
        ):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                continue
            name = node.targets[0].id
            if requires_grad_leaf(node.value):
                leaves[name] = node.lineno
                continue
            if name not in leaves:
                continue
            uses_itself = isinstance(node.value, ast.BinOp) and any(
                isinstance(n, ast.Name) and n.id == name for n in ast.walk(node.value)
            )
            if not uses_itself or context.in_no_grad(node):
                if not uses_itself:
                    leaves.pop(name)  # rebound to something else: no longer the leaf
                continue
            yield Lint(
                CODE,
                f"`{name}` (a leaf with requires_grad=True, line {leaves[name]}) is rebound to "
                "a new tensor computed from it: later `.grad` reads see None and the optimizer "
                f"updates the old tensor. Update in place: `with torch.no_grad(): {name} -= ...`.",
                *span(node),
            )


SPEC = LintSpec(
    CODE,
    "warning",
    "a `requires_grad=True` leaf rebound to a tensor computed from it (`w = w - lr * w.grad`)",
    check,
    needs=("requires_grad",),
)
