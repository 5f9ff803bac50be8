"""``eval-without-train``: ``model.eval()`` inside a training loop with no ``model.train()``
in the loop, so every training step after the first validation runs in evaluation mode
(dropout off, batch norm frozen on its running statistics)."""

from __future__ import annotations

import ast
from typing import Iterator

from .ast_helpers import LOOPS, called_name, span
from .context import LintContext, walk_scope
from .model import Edit, Lint, LintSpec
from .training_mode import eval_receiver, functions_calling_train, train_receiver, trains

CODE = "eval-without-train"


def check(context: LintContext) -> Iterator[Lint]:
    helpers = functions_calling_train(context)
    reported: set[ast.AST] = set()
    loops = sorted(
        (n for n in context.nodes if isinstance(n, LOOPS)), key=lambda n: -n.lineno
    )  # innermost first: the loop whose body gets the fix
    for loop in loops:
        body = list(walk_scope(loop.body))
        if not trains(body) or any(train_receiver(n) for n in body):
            continue
        if any(isinstance(n, ast.Call) and called_name(n) in helpers for n in body):
            continue
        for node in body:
            model = eval_receiver(node)
            if model is None or node in reported:
                continue
            reported.add(node)
            first = loop.body[0]
            edits: tuple[Edit, ...] = ()
            if first.lineno > loop.lineno:
                indent = " " * first.col_offset
                edits = (Edit(first.lineno, 0, first.lineno, 0, f"{indent}{model}.train()\n"),)
            yield Lint(
                CODE,
                f"`{model}` is put in evaluation mode inside the training loop and never back "
                f"in training mode: the training steps after it run with dropout off and batch "
                f"norm frozen. Call `{model}.train()` before the training step (at the start "
                "of the loop).",
                *span(node),
                fix_title=f"Insert `{model}.train()` at the start of the loop" if edits else None,
                edits=edits,
            )


SPEC = LintSpec(
    CODE,
    "warning",
    "`model.eval()` in a training loop with no `model.train()` before the next step",
    check,
    needs=(".eval()|.train(False)", "backward|grad("),
)
