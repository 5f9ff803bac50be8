"""The registry of static lints, and :func:`lint`, which runs them.

Adding a lint is one module in this package (its ``CODE``, ``check`` and ``SPEC``) and one line
in :data:`LINTS`; the language server, ``tensor-dap lint`` and the docs' table read this list.
"""

from __future__ import annotations

import ast
from typing import Optional

from . import (
    cpu_accumulator,
    data_write,
    eval_without_no_grad,
    eval_without_train,
    leaf_rebound,
    load_map_location,
    load_weights_only,
    loss_accumulated,
    missing_zero_grad,
    nll_loss_input,
    optimizer_in_loop,
    penalty_as_number,
    plain_tensor_attribute,
    requires_grad_non_leaf,
    softmax_cross_entropy,
    zero_grad_before_step,
)
from .context import LintContext, parse
from .model import Lint, LintSpec
from .suppression import is_ignored

LINTS: tuple[LintSpec, ...] = (
    cpu_accumulator.SPEC,
    load_map_location.SPEC,
    missing_zero_grad.SPEC,
    data_write.SPEC,
    leaf_rebound.SPEC,
    softmax_cross_entropy.SPEC,
    nll_loss_input.SPEC,
    eval_without_train.SPEC,
    eval_without_no_grad.SPEC,
    zero_grad_before_step.SPEC,
    optimizer_in_loop.SPEC,
    penalty_as_number.SPEC,
    loss_accumulated.SPEC,
    requires_grad_non_leaf.SPEC,
    load_weights_only.SPEC,
    plain_tensor_attribute.SPEC,
)

BY_CODE: dict[str, LintSpec] = {spec.code: spec for spec in LINTS}


def severity(found: Lint) -> str:
    """The finding's severity: its own, else its lint's default."""
    spec = BY_CODE.get(found.code)
    return found.severity or (spec.severity if spec is not None else "warning")


def lint(source: str, tree: Optional[ast.Module] = None) -> list[Lint]:
    """Every static lint of ``source`` that no ``# tensor-dap: ignore`` comment silences, in
    source order."""
    tree = tree if tree is not None else parse(source)
    if tree is None:
        return []
    context = LintContext(tree, source)
    found: list[Lint] = []
    for spec in LINTS:
        if spec.wanted(source):
            found.extend(spec.check(context))
    kept = [f for f in found if not is_ignored(f, context.lines)]
    return sorted(kept, key=lambda f: (f.line, f.col, f.code))
