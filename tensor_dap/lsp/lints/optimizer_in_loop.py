"""``optimizer-in-loop``: an optimizer with state made in the same loop that steps it
(``optimizer = torch.optim.Adam(model.parameters())`` next to ``optimizer.step()``): each
iteration's new optimizer starts with no state, so Adam's moments, SGD's momentum and LBFGS's
history never build up. The source-only twin of the ``optimizer-remade`` rule.

Silent on an optimizer made per epoch and stepped in an inner loop, on SGD without momentum
(it keeps no state) and on one whose parameters come from a name the loop assigns (a new model
per trial, MAML's copies of the meta-model).
"""

from __future__ import annotations

import ast
from typing import Iterator, Optional

from .ast_helpers import LOOPS, SCOPES, called_name, names_in, span
from .context import LintContext, target_key, walk_scope
from .model import Edit, Lint, LintSpec

CODE = "optimizer-in-loop"

#: torch.optim classes that keep state per parameter from their first step on
_STATEFUL = frozenset(
    {"Adam", "AdamW", "Adamax", "NAdam", "RAdam", "SparseAdam", "RMSprop", "Adagrad"}
    | {"Adadelta", "Rprop", "ASGD", "LBFGS"}
)
#: what SGD keeps state for, when not zero
_SGD_STATE = ("momentum",)


def _optimizer_class(call: ast.Call) -> Optional[str]:
    """``Adam`` for ``torch.optim.Adam(...)``, ``optim.Adam(...)`` and ``Adam(...)``; SGD only
    with a momentum that is not a literal 0."""
    name = called_name(call)
    if isinstance(call.func, ast.Attribute):
        owner = ast.unparse(call.func.value)
        if owner not in ("torch.optim", "optim"):
            return None
    if name in _STATEFUL:
        return name
    if name == "SGD":
        for keyword in call.keywords:
            if keyword.arg in _SGD_STATE:
                value = keyword.value
                zero = isinstance(value, ast.Constant) and not value.value
                return None if zero else name
    return None


def _same_level(loop: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``loop``'s body outside its inner loops (and functions)."""
    todo: list[ast.AST] = list(loop.body)  # type: ignore[attr-defined]
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (*SCOPES, *LOOPS)):
            todo.extend(ast.iter_child_nodes(node))


def _assigned_in(loop: ast.AST) -> set[str]:
    names: set[str] = set()
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        names |= names_in(loop.target)
    for node in walk_scope(loop.body):  # type: ignore[attr-defined]
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def check(context: LintContext) -> Iterator[Lint]:
    for loop in context.nodes:
        if not isinstance(loop, LOOPS):
            continue
        assigned = _assigned_in(loop)
        level = list(_same_level(loop))
        stepped = {
            target_key(n.func.value)
            for n in level
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "step"
        }
        for node in level:
            if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
                continue
            kind = _optimizer_class(node.value)
            [target] = node.targets if len(node.targets) == 1 else [None]
            name = target_key(target) if target is not None else None
            if kind is None or name is None or name not in stepped:
                continue
            if names_in(*node.value.args[:1]) & assigned:
                continue  # new parameters each time: a model per trial, MAML's copies
            yield _lint(loop, node, name, kind, assigned)


def _lint(loop: ast.AST, made: ast.Assign, name: str, kind: str, assigned: set[str]) -> Lint:
    movable = made.lineno == made.end_lineno and not names_in(made.value) & assigned
    edits: tuple[Edit, ...] = ()
    if movable:
        indent = " " * loop.col_offset  # type: ignore[attr-defined]
        text = f"{indent}{ast.unparse(made)}\n"
        edits = (
            Edit(made.lineno, 0, made.lineno + 1, 0, ""),
            Edit(loop.lineno, 0, loop.lineno, 0, text),  # type: ignore[attr-defined]
        )
    return Lint(
        CODE,
        f"`{name}` is a new {kind} at every iteration of this loop, which also steps it: "
        f"each new {kind} starts with no state ({_state(kind)}), so it never builds up and "
        f"every step is its first. Make the optimizer once, before the loop.",
        *span(made.value),
        fix_title=f"Move `{name} = ...` before the loop" if edits else None,
        edits=edits,
    )


def _state(kind: str) -> str:
    return {
        "SGD": "momentum buffers",
        "LBFGS": "its curvature history",
        "Adagrad": "the sums of squared gradients",
    }.get(kind, "moment estimates and step count")


SPEC = LintSpec(
    CODE,
    "warning",
    "an optimizer with state (Adam, SGD with momentum...) made in the loop that steps it",
    check,
    needs=("optim", "step"),
)
