"""``cpu-accumulator``: a float accumulator made without a device (``torch.zeros(1)``,
``torch.tensor(0.0)``, ``torch.Tensor([0.0])``) that a loop then adds tensors to, in a file that
uses an accelerator. Adding Python numbers (``total += loss.item()``) is fine."""

from __future__ import annotations

import ast
from typing import Iterator, Optional

from .ast_helpers import (
    LOOPS,
    accumulated,
    factory_without_device,
    is_literal,
    is_torch_call,
    span,
    uses_accelerator,
)
from .context import LintContext, walk_scope
from .fixes import device_fix
from .model import Lint, LintSpec

CODE = "cpu-accumulator"

_SCALAR_ACCUMULATORS = {"zeros", "ones", "tensor", "Tensor", "empty", "full"}


def _accumulations(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """Per name, the first accumulation (see :func:`accumulated`) inside a loop of ``body``."""
    found: dict[str, ast.stmt] = {}
    for loop in walk_scope(body):
        if not isinstance(loop, LOOPS):
            continue
        for node in walk_scope(loop.body):
            added = accumulated(node)
            if added is None or not isinstance(node, ast.stmt):
                continue
            name = added[0]
            if name not in found or node.lineno < found[name].lineno:
                found[name] = node
    return found


def check(context: LintContext) -> Iterator[Lint]:
    if not uses_accelerator(context.nodes):
        return
    for body in context.scopes():
        accumulations: Optional[dict[str, ast.stmt]] = None
        for node in walk_scope(body):
            if not (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                continue
            call = factory_without_device(node.value)
            if call is None or not is_torch_call(call, _SCALAR_ACCUMULATORS):
                continue
            if not all(is_literal(a) for a in call.args):
                continue
            name = node.targets[0].id
            if accumulations is None:
                accumulations = _accumulations(body)
            added = accumulations.get(name)
            if added is None:
                continue
            title, edits = device_fix(call, context.device)
            source = context.segment(call)
            yield Lint(
                CODE,
                f"`{name}` is created on the CPU by `{source}` and a loop adds tensors to it "
                f"(line {added.lineno}); if they live on an accelerator the devices mix. "
                f"Create it with `device=`, or add `.item()` values.",
                *span(call),
                fix_title=title,
                edits=edits,
            )


SPEC = LintSpec(
    CODE,
    "warning",
    "a float accumulator made on the CPU that a loop adds (accelerator) tensors to",
    check,
    needs=("torch",),
)
