"""``data-write``: ``p.data = ...``, ``p.data -= ...``, ``p.data.add_(...)`` outside
``torch.no_grad()`` (``p.grad.data`` and reads like ``p.data.clone()`` are fine).

A warning only where the receiver is known to be a tensor autograd tracks (``m.weight``, a loop
variable over ``parameters()``, an ``nn.Parameter``) and the write comes between a forward pass
and its backward, where a saved value may change under autograd's feet. Elsewhere it is a hint
saying when it would matter: in ``__init__``, an ``_init_weights``-style function or one given
to ``model.apply`` no graph exists yet; a manual step after ``backward()`` finds the graph
freed. An object's own attribute (``self.data = [...]`` in a
``Dataset``) or a plain value (a list, a string) is not ``Tensor.data`` at all: no lint.
"""

from __future__ import annotations

import ast
from typing import Iterator, Optional

from .ast_helpers import span
from .context import LintContext
from .model import Edit, Lint, LintSpec
from .names import (
    applied_functions,
    between_forward_and_backward,
    in_init_function,
    is_own_attribute,
    is_parameter,
    is_plain_value,
)

CODE = "data-write"


def _data_of(node: ast.AST) -> Optional[ast.Attribute]:
    """``<p>.data`` where ``p`` is not a ``.grad`` -> the attribute node, else None."""
    if isinstance(node, ast.Attribute) and node.attr == "data":
        receiver = node.value
        if isinstance(receiver, ast.Attribute) and receiver.attr == "grad":
            return None
        return node
    return None


def check(context: LintContext) -> Iterator[Lint]:
    applied: Optional[set[str]] = None
    for node in context.nodes:
        data: Optional[ast.Attribute] = None
        statement: Optional[ast.stmt] = None
        new_text: Optional[str] = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            data = _data_of(node.targets[0])
            if data is not None and is_plain_value(node.value):
                data = None
            if data is not None:
                receiver = context.segment(data.value)
                statement, new_text = node, f"{receiver}.copy_({context.segment(node.value)})"
        elif isinstance(node, ast.AugAssign):
            data = _data_of(node.target)
            statement = node if data is not None else None
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr.endswith("_")
                and not func.attr.endswith("__")
            ):
                data = _data_of(func.value)
                statement = node if data is not None else None
        if data is None or statement is None or is_own_attribute(data):
            continue
        if context.in_no_grad(statement):
            continue
        if applied is None:
            applied = applied_functions(context)
        title, edits = _no_grad_fix(context, statement, data, new_text)
        text = ast.unparse(data)
        if in_init_function(context, statement, applied):
            message, severity = (
                f"`{text}` is written while the model is built: harmless here, since no "
                "autograd graph holds the tensor yet. `.data` writes matter when a backward "
                "later runs through values saved before the write. `torch.nn.init` functions, "
                "or a write under `torch.no_grad()`, say the same without `.data`.",
                "hint",
            )
        elif is_parameter(context, data.value) and between_forward_and_backward(context, statement):
            message, severity = (
                f"`{text}` writes bypass autograd: the change is invisible to its version "
                "counter, so a backward through values saved before the write silently uses "
                "the new numbers (it matters while a graph that used the tensor is still to be "
                "backpropagated). Write under `with torch.no_grad():` to the tensor itself.",
                "warning",
            )
        elif is_parameter(context, data.value):
            message, severity = (
                f"`{text}` writes bypass autograd, harmless here: no backward is pending (the "
                "write is not between a forward pass and its `backward()`). They matter while "
                "a graph that used the tensor is still to be backpropagated. Writing under "
                "`with torch.no_grad():` says the same without `.data`.",
                "hint",
            )
        else:
            message, severity = (
                f"If `{ast.unparse(data.value)}` is a tensor, `{text}` writes bypass autograd: "
                "this matters when a backward later runs through values saved before the write "
                "(it silently uses the new numbers). Write under `with torch.no_grad():` to the "
                "tensor itself.",
                "hint",
            )
        yield Lint(
            CODE,
            message,
            *span(statement),
            fix_title=title,
            edits=edits,
            severity=severity,
        )


def _no_grad_fix(
    context: LintContext, statement: ast.stmt, data: ast.Attribute, new_text: Optional[str]
) -> tuple[Optional[str], tuple[Edit, ...]]:
    """``p.data.add_(x)`` -> ``with torch.no_grad():`` + ``p.add_(x)`` (one-line statements
    that start a line)."""
    line = context.line_bytes(statement.lineno)
    if (
        (statement.end_lineno or 0) != statement.lineno
        or line[: statement.col_offset].strip()
        or "\n" in (new_text or "")
    ):
        return None, ()
    if new_text is None:  # the statement's own text without ``.data``
        cut, rest = data.value.end_col_offset or 0, data.end_col_offset or 0
        new_text = (
            line[statement.col_offset : cut] + line[rest : statement.end_col_offset]
        ).decode("utf-8", errors="replace")
    indent = " " * statement.col_offset
    replacement = f"with torch.no_grad():\n{indent}    {new_text}"
    first, col, _, end = span(statement)
    return "Write under `torch.no_grad()` instead of through `.data`", (
        Edit(first, col, first, end, replacement),
    )


SPEC = LintSpec(
    CODE,
    "warning",
    "a write through `.data` outside `torch.no_grad()`",
    check,
    needs=(".data",),
)
