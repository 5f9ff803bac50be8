"""``eval-without-no-grad``: after ``model.eval()``, a loop that runs the model without
``torch.no_grad()`` / ``torch.inference_mode()`` and never trains: autograd records every
activation for a backward that never comes (memory and time for nothing)."""

from __future__ import annotations

import ast
from typing import Iterator, Optional

from .ast_helpers import LOOPS, called_name, span
from .context import LintContext, walk_scope
from .model import Edit, Lint, LintSpec
from .names import runs_without_grad
from .training_mode import eval_receiver, train_receiver, trains

CODE = "eval-without-no-grad"


def _disables_grad(node: ast.AST) -> bool:
    """``torch.set_grad_enabled(False)`` / ``torch.autograd.set_grad_enabled(False)``."""
    return (
        isinstance(node, ast.Call)
        and called_name(node) == "set_grad_enabled"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value is False
    )


def check(context: LintContext) -> Iterator[Lint]:
    for body in context.scopes():
        nodes = list(walk_scope(body))
        evals = [(n, eval_receiver(n)) for n in nodes]
        evals_at = [(n.lineno, model) for n, model in evals if model is not None]  # type: ignore[attr-defined]
        if not evals_at or any(_disables_grad(n) for n in nodes):
            continue
        trains_at = [n.lineno for n in nodes if train_receiver(n)]  # type: ignore[attr-defined]
        for loop in (n for n in nodes if isinstance(n, LOOPS)):
            modes = [(line, m) for line, m in evals_at if line < loop.lineno]
            if not modes:
                continue
            line, model = max(modes)
            if any(line < t < loop.lineno for t in trains_at):
                continue
            inside = list(walk_scope(loop.body))
            if trains(inside) or any(train_receiver(n) for n in inside):
                continue
            forward = next(
                (
                    n
                    for n in sorted(inside, key=lambda n: getattr(n, "lineno", 0))
                    if isinstance(n, ast.Call) and ast.unparse(n.func) == model
                ),
                None,
            )
            if forward is None:
                continue
            if runs_without_grad(context, forward):
                continue
            title, edits = _wrap_fix(context, loop)
            yield Lint(
                CODE,
                f"`{model}` is in evaluation mode (line {line}) and this loop runs it without "
                "`torch.no_grad()`: autograd records every activation for a backward that "
                "never comes, costing memory and time. Wrap the loop in "
                "`with torch.no_grad():` (or `torch.inference_mode()`).",
                *span(forward),
                fix_title=title,
                edits=edits,
            )


def _wrap_fix(context: LintContext, loop: ast.stmt) -> tuple[Optional[str], tuple[Edit, ...]]:
    """``with torch.no_grad():`` around the loop's lines, indented by four spaces; none when the
    loop shares a line, is indented with tabs or holds a string over several lines."""
    first, last = loop.lineno, loop.end_lineno or loop.lineno
    lines = [
        context.line_bytes(n).decode("utf-8", errors="replace") for n in range(first, last + 1)
    ]
    indent = lines[0][: loop.col_offset]
    if indent.strip() or any("\t" in text[: len(text) - len(text.lstrip())] for text in lines):
        return None, ()
    if any(
        isinstance(n, ast.Constant) and isinstance(n.value, str) and n.lineno != n.end_lineno
        for n in ast.walk(loop)
    ):
        return None, ()
    body = "\n".join(f"    {text}" if text.strip() else text for text in lines)
    edit = Edit(
        first, 0, last, len(context.line_bytes(last)), f"{indent}with torch.no_grad():\n{body}"
    )
    return "Wrap the loop in `with torch.no_grad():`", (edit,)


SPEC = LintSpec(
    CODE,
    "information",
    "an evaluation loop after `model.eval()` without `torch.no_grad()`",
    check,
    needs=(".eval()|.train(False)",),
)
