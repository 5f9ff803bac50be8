"""``missing-zero-grad``: a loop calling ``.backward()`` and ``.step()`` that never zeroes the
gradients in its body (``zero_grad()``, ``p.grad = None``, ``p.grad.zero_()`` anywhere in it)."""

from __future__ import annotations

import ast
from typing import Iterator, Optional

from .ast_helpers import LOOPS, method_call, span
from .context import LintContext, walk_scope
from .model import Edit, Lint, LintSpec

CODE = "missing-zero-grad"


def zeroes_grads(node: ast.AST) -> bool:
    """``x.zero_grad(...)``, ``p.grad = None``, ``p.grad.zero_()``, ``p.grad.detach_()`` ..."""
    if method_call(node, "zero_grad"):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        receiver = node.func.value
        if node.func.attr in ("zero_", "detach_", "requires_grad_") and (
            isinstance(receiver, ast.Attribute) and receiver.attr == "grad"
        ):
            return True
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in node.targets)
    return False


def optimizer_of(step: ast.Call) -> Optional[str]:
    """The optimizer a ``.step()`` call steps: ``optimizer`` for ``optimizer.step()`` and
    ``scaler.step(optimizer)``; None for schedulers and anything else."""
    if not isinstance(step.func, ast.Attribute) or step.func.attr != "step":
        return None
    receiver = ast.unparse(step.func.value)
    if "sched" in receiver.lower():
        return None
    if "scaler" in receiver.lower():  # scaler.step(optimizer)
        if step.args and isinstance(step.args[0], (ast.Name, ast.Attribute)):
            return ast.unparse(step.args[0])
        return None
    if step.args or step.keywords:
        return None  # closure-style steps zero inside the closure
    return receiver


def _training_calls(loop: ast.AST) -> tuple[bool, list[ast.Call], bool]:
    """Whether ``loop`` calls ``.backward()``, its ``.step()`` calls, whether it zeroes grads."""
    backward = zeroes = False
    steps = []
    for node in walk_scope(loop.body):  # type: ignore[attr-defined]
        if method_call(node, "backward"):
            backward = True
        elif isinstance(node, ast.Call) and optimizer_of(node):
            steps.append(node)
        if zeroes_grads(node):
            zeroes = True
    return backward, steps, zeroes


def check(context: LintContext) -> Iterator[Lint]:
    for loop in context.nodes:
        if not isinstance(loop, LOOPS):
            continue
        backward, steps, zeroes = _training_calls(loop)
        if not backward or not steps or zeroes:
            continue
        inner = [n for n in walk_scope(loop.body) if isinstance(n, LOOPS)]
        if any(_training_calls(n)[0] and _training_calls(n)[1] for n in inner):
            continue  # the innermost training loop is the one to report
        step = min(steps, key=lambda s: (s.lineno, s.col_offset))
        optimizer = optimizer_of(step) or "optimizer"
        first = loop.body[0]
        edits: tuple[Edit, ...] = ()
        title = None
        if first.lineno > loop.lineno:
            indent = " " * first.col_offset
            edits = (Edit(first.lineno, 0, first.lineno, 0, f"{indent}{optimizer}.zero_grad()\n"),)
            title = f"Insert `{optimizer}.zero_grad()` at the start of the loop"
        yield Lint(
            CODE,
            f"This loop calls `.backward()` and `{ast.unparse(step.func)}()` but never zeroes "
            "the gradients, so each step applies the sum of all gradients so far. Call "
            f"`{optimizer}.zero_grad()` in the loop.",
            *span(step),
            fix_title=title,
            edits=edits,
        )


SPEC = LintSpec(
    CODE,
    "warning",
    "a training loop (`backward()` and `step()`) that never zeroes the gradients",
    check,
    needs=("backward", "step"),
)
