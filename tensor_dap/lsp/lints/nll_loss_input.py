"""``nll-loss-input``: ``NLLLoss`` / ``F.nll_loss`` given raw logits or softmax probabilities:
it expects log-probabilities (``log_softmax``), and silently computes a meaningless loss
otherwise."""

from __future__ import annotations

import ast
from typing import Iterator

from .ast_helpers import span
from .context import LintContext
from .loss_inputs import LOGITS, SOFTMAX, loss_inputs
from .model import Edit, Lint, LintSpec

CODE = "nll-loss-input"


def _renamed(call: ast.Call, old: str, new: str) -> tuple[Edit, ...]:
    """The edit renaming the called attribute ``old`` of ``call`` to ``new``."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr != old:
        return ()
    line, end = func.end_lineno or call.lineno, func.end_col_offset or 0
    return (Edit(line, end - len(old), line, end, new),)


def check(context: LintContext) -> Iterator[Lint]:
    for node, given, kind in loss_inputs(context, "nll_loss"):
        if kind not in (SOFTMAX, LOGITS):
            continue
        edits: tuple[Edit, ...] = ()
        if kind == SOFTMAX and isinstance(given, ast.Call):
            edits = _renamed(given, "softmax", "log_softmax")
            title = "Use `log_softmax`"
            what = "softmax probabilities"
        else:
            edits = _renamed(node, "nll_loss", "cross_entropy")
            title = "Use `cross_entropy` (log_softmax and nll_loss in one)"
            what = "raw logits"
        yield Lint(
            CODE,
            f"`nll_loss` is given {what}, but it expects log-probabilities: it just picks "
            "`-input[target]`, so the loss is meaningless and can go below zero. Apply "
            "`log_softmax` first, or use `cross_entropy` on the logits.",
            *span(given),
            fix_title=title if edits else None,
            edits=edits,
        )


SPEC = LintSpec(
    CODE,
    "warning",
    "`NLLLoss` / `F.nll_loss` given logits or probabilities instead of log-probabilities",
    check,
    needs=("nll_loss|NLLLoss",),
)
