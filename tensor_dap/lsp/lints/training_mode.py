"""Where a model is switched between training and evaluation mode, and where it is trained: the
calls ``eval-without-train`` and ``eval-without-no-grad`` look for."""

from __future__ import annotations

import ast
from typing import Optional

from .ast_helpers import method_call
from .context import LintContext, walk_scope


def eval_receiver(node: ast.AST) -> Optional[str]:
    """``model`` for ``model.eval()`` / ``model.train(False)``; else None."""
    call = method_call(node, "eval")
    if call is not None and not call.args and not call.keywords:
        assert isinstance(call.func, ast.Attribute)
        return ast.unparse(call.func.value)
    call = method_call(node, "train")
    if call is not None and _mode(call) is False:
        assert isinstance(call.func, ast.Attribute)
        return ast.unparse(call.func.value)
    return None


def train_receiver(node: ast.AST) -> Optional[str]:
    """``model`` for ``model.train()`` / ``model.train(True)`` / ``model.train(mode=flag)``."""
    call = method_call(node, "train")
    if call is not None and _mode(call) is not False:
        assert isinstance(call.func, ast.Attribute)
        return ast.unparse(call.func.value)
    return None


def _mode(call: ast.Call) -> Optional[bool]:
    """The constant mode a ``.train(...)`` call sets (True without arguments), else None."""
    values = [*call.args, *(k.value for k in call.keywords if k.arg == "mode")]
    if not values:
        return True
    first = values[0]
    return (
        first.value if isinstance(first, ast.Constant) and isinstance(first.value, bool) else None
    )


def trains(nodes: list[ast.AST]) -> bool:
    """Whether ``nodes`` run a training step: ``.backward()`` or ``torch.autograd.grad``."""
    return any(method_call(n, "backward") or method_call(n, "grad") for n in nodes)


def functions_calling_train(context: LintContext) -> set[str]:
    """The file's functions that switch a model to training mode themselves (a ``train_epoch``
    helper that starts with ``model.train()``)."""
    found = set()
    for node in context.nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            train_receiver(n) for n in walk_scope(node.body)
        ):
            found.add(node.name)
    return found
