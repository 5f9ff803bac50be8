"""``softmax-into-cross-entropy``: probabilities from ``softmax`` given to
``CrossEntropyLoss`` / ``F.cross_entropy``, which apply ``log_softmax`` themselves: a double
softmax, whose loss barely moves and whose gradients vanish. (``log_softmax`` given to
cross-entropy is left alone: it is redundant, not wrong.)"""

from __future__ import annotations

import ast
from typing import Iterator, Optional

from .ast_helpers import called_name, span
from .context import LintContext
from .loss_inputs import SOFTMAX, loss_inputs
from .model import Edit, Lint, LintSpec

CODE = "softmax-into-cross-entropy"


def softmax_input(call: ast.Call) -> Optional[ast.expr]:
    """``x`` of ``F.softmax(x, dim=1)``, ``x.softmax(1)`` or ``nn.Softmax(dim=1)(x)``."""
    func = call.func
    if isinstance(func, ast.Call):
        return call.args[0] if call.args else None
    if isinstance(func, ast.Attribute) and func.attr == "softmax":
        if isinstance(func.value, ast.Name) and func.value.id in ("F", "functional", "torch"):
            return call.args[0] if call.args else None
        if isinstance(func.value, ast.Attribute) and func.value.attr == "functional":
            return call.args[0] if call.args else None
        return func.value
    return None


def check(context: LintContext) -> Iterator[Lint]:
    for _, given, kind in loss_inputs(context, "cross_entropy"):
        if kind != SOFTMAX:
            continue
        title: Optional[str] = None
        edits: tuple[Edit, ...] = ()
        inner = softmax_input(given) if isinstance(given, ast.Call) else None
        if inner is not None and called_name(given) in ("softmax", "Softmax"):
            text = context.segment(inner)
            title = f"Pass the logits `{text}` to the loss"
            edits = (Edit(*span(given), text),)
        where = "" if isinstance(given, ast.Call) else f" (`{ast.unparse(given)}`)"
        yield Lint(
            CODE,
            f"Cross-entropy is given softmax probabilities{where}, but it applies "
            "`log_softmax` itself: the softmax is applied twice, the loss barely moves and the "
            "gradients vanish. Pass the raw logits (keep `softmax` for reading probabilities).",
            *span(given),
            fix_title=title,
            edits=edits,
        )


SPEC = LintSpec(
    CODE,
    "warning",
    "softmax probabilities given to `CrossEntropyLoss` / `F.cross_entropy` (double softmax)",
    check,
    needs=("oftmax", "cross_entropy|CrossEntropy"),
)
