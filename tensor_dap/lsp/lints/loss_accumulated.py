"""``loss-accumulated-with-graph``: a loss tensor summed (``total += loss``) or kept
(``losses.append(loss)``) across iterations without ``.item()`` / ``.detach()``: each iteration's
autograd graph stays alive through the total, so memory grows every step. The static twin of the
runtime rule for kept history.

Left alone: ``loss = loss + ...`` / ``total += loss`` followed by ``total.backward()`` (gradient
accumulation through the sum), code under ``no_grad``, and values that are numbers."""

from __future__ import annotations

import ast
import re
from typing import Iterator, Optional

from .ast_helpers import LOOPS, accumulated, backward_names, called_name, method_call, span
from .context import LintContext, walk_scope
from .model import Edit, Lint, LintSpec
from .names import latest_value, runs_without_grad

CODE = "loss-accumulated-with-graph"

_LOSS_CALL = re.compile(r"loss|criterion|cross_entropy|mse|nll|l1|bce|kl_div", re.IGNORECASE)


def _is_loss(context: LintContext, value: ast.expr, backwarded: set[str]) -> bool:
    """Whether ``value`` is a loss tensor with its graph: a name ``.backward()`` is called on,
    ``outputs.loss``, or a name last assigned a loss function's result."""
    if isinstance(value, ast.Attribute):
        return value.attr == "loss"
    if not isinstance(value, ast.Name):
        return False
    made = latest_value(context, value.id, value)
    if made is not None and runs_without_grad(context, made):
        return False  # computed under no_grad (a validation loss): no graph to keep
    if value.id in backwarded:
        return True
    if isinstance(made, ast.Attribute):
        return made.attr == "loss"
    return isinstance(made, ast.Call) and bool(_LOSS_CALL.search(called_name(made) or ""))


def _kept(node: ast.AST) -> Optional[tuple[str, ast.expr, bool]]:
    """``total += loss`` -> (``total``, ``loss``, summed); ``losses.append(loss)`` ->
    (``losses``, ``loss``, not summed)."""
    added = accumulated(node)
    if added is not None:
        return added[0], added[1], True
    if isinstance(node, ast.Expr):
        call = method_call(node.value, "append")
        if call is not None and len(call.args) == 1 and isinstance(call.func, ast.Attribute):
            target = call.func.value
            if isinstance(target, ast.Name):
                return target.id, call.args[0], False
    return None


def check(context: LintContext) -> Iterator[Lint]:
    for body in context.scopes():
        nodes = list(walk_scope(body))
        backwarded: Optional[set[str]] = None
        seen: set[ast.AST] = set()
        for loop in (n for n in nodes if isinstance(n, LOOPS)):
            for node in walk_scope(loop.body):
                kept = _kept(node)
                if kept is None or node in seen:
                    continue
                seen.add(node)
                total, value, summed = kept
                if backwarded is None:
                    backwarded = backward_names(nodes)
                if total in backwarded or not _is_loss(context, value, backwarded):
                    continue
                if runs_without_grad(context, node):
                    continue
                yield _lint(context, nodes, total, value, summed)


def _lint(
    context: LintContext, nodes: list[ast.AST], total: str, value: ast.expr, summed: bool
) -> Lint:
    text = context.segment(value)
    number = summed and _starts_as_number(nodes, total)
    suffix = ".item()" if number else ".detach()"
    _, _, line, end = span(value)
    how = "adds" if summed else "appends"
    return Lint(
        CODE,
        f"`{total}` {how} the loss tensor `{text}` with its autograd graph each iteration: "
        "every iteration's graph stays in memory through it, which grows until it runs out. "
        f"Keep `{text}.item()` for logging (or `{text}.detach()` to stay a tensor).",
        *span(value),
        fix_title=f"Keep `{text}{suffix}`",
        edits=(Edit(line, end, line, end, suffix),),
    )


def _starts_as_number(nodes: list[ast.AST], name: str) -> bool:
    """Whether ``name`` starts as a Python number (``total = 0.0``) and is never used as a
    tensor (``total.item()``, ``total.cpu()``): then ``.item()`` keeps it a number."""
    starts = any(
        isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
        and isinstance(n.value, ast.Constant)
        and isinstance(n.value.value, (int, float))
        for n in nodes
    )
    as_tensor = any(
        isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == name
        for n in nodes
    )
    return starts and not as_tensor


SPEC = LintSpec(
    CODE,
    "warning",
    "a loss tensor summed or kept across iterations with its graph (`total += loss`)",
    check,
    needs=("loss",),
)
