"""What a loss function is given: probabilities (``softmax``), log-probabilities
(``log_softmax``) or raw scores (``logits``), as far as the file tells; and which calls are
cross-entropy or negative log-likelihood losses.

An input is classified through names (the last value assigned in the same function), through
``nn.Sequential(...)`` and ``nn.Softmax``-style modules, through a model class of the file whose
``forward`` returns one kind, and through ``.logits`` (Hugging Face outputs). Unknown is None:
the lints judge only what they know.
"""

from __future__ import annotations

import ast
from typing import Iterator, Optional

from .ast_helpers import called_name
from .context import LintContext, target_key
from .names import latest_value

SOFTMAX, LOG_SOFTMAX, LOGITS = "softmax", "log_softmax", "logits"
_MODULE_KINDS = {"Softmax": SOFTMAX, "LogSoftmax": LOG_SOFTMAX, "Linear": LOGITS}
_FUNCTION_KINDS = {"softmax": SOFTMAX, "log_softmax": LOG_SOFTMAX}
_LOSS_MODULES = {"CrossEntropyLoss": "cross_entropy", "NLLLoss": "nll_loss"}
_MOVES = ("to", "cuda", "cpu", "float", "half", "double", "train", "eval")


def loss_kind(context: LintContext, call: ast.Call) -> Optional[str]:
    """``cross_entropy`` or ``nll_loss`` for ``F.cross_entropy(...)``, ``nn.NLLLoss()(...)``,
    ``criterion(...)`` with ``criterion = nn.CrossEntropyLoss()``; else None."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in ("cross_entropy", "nll_loss"):
        return func.attr
    if isinstance(func, ast.Call):
        return _LOSS_MODULES.get(called_name(func) or "")
    if isinstance(func, (ast.Name, ast.Attribute)):
        made = _bound_value(context, func, call)
        if isinstance(made, ast.Call):
            return _LOSS_MODULES.get(called_name(made) or "")
    return None


def loss_inputs(
    context: LintContext, kind: str
) -> Iterator[tuple[ast.Call, ast.expr, Optional[str]]]:
    """Each call of a ``kind`` loss (see :func:`loss_kind`), its input and what made it (see
    :func:`produces`)."""
    for node in context.nodes:
        if isinstance(node, ast.Call) and node.args and loss_kind(context, node) == kind:
            yield node, node.args[0], produces(context, node.args[0])


def produces(context: LintContext, node: ast.AST, depth: int = 0) -> Optional[str]:
    """:data:`SOFTMAX`, :data:`LOG_SOFTMAX`, :data:`LOGITS` or None (unknown) for the value of
    ``node``."""
    if depth > 4:
        return None
    if isinstance(node, ast.Name):
        value = latest_value(context, node.id, node)
        return produces(context, value, depth + 1) if value is not None else None
    if isinstance(node, ast.Attribute):
        return LOGITS if node.attr == "logits" else None
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    name = called_name(node)
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == "self"
    ):  # self.softmax(x): what the module bound to self.softmax returns
        bound = _bound_value(context, func, node)
        if bound is not None:
            return _module_output(context, bound, depth)
    if name in _FUNCTION_KINDS:
        return _FUNCTION_KINDS[name]
    if name == "log":
        inner = func.value if isinstance(func, ast.Attribute) and not node.args else None
        inner = inner if inner is not None else (node.args[0] if node.args else None)
        inner_kind = produces(context, inner, depth + 1) if inner is not None else None
        return LOG_SOFTMAX if inner_kind == SOFTMAX else None
    if isinstance(func, ast.Call):  # nn.Softmax(dim=1)(x)
        return _MODULE_KINDS.get(called_name(func) or "")
    if isinstance(func, (ast.Name, ast.Attribute)) and name not in _MOVES:
        return _module_output(context, _bound_value(context, func, node), depth)
    return None


def _module_output(context: LintContext, made: Optional[ast.AST], depth: int) -> Optional[str]:
    """What calling the module made by ``made`` returns (``nn.Sequential(..., nn.Softmax())``,
    ``nn.Linear(...)``, ``Net()`` with a ``forward`` of the file)."""
    while isinstance(made, ast.Call) and called_name(made) in _MOVES:
        made = made.func.value if isinstance(made.func, ast.Attribute) else None
    if not isinstance(made, ast.Call):
        return None
    name = called_name(made) or ""
    if name == "Sequential" and made.args:
        last = made.args[-1]
        return _MODULE_KINDS.get(called_name(last) or "") if isinstance(last, ast.Call) else None
    if name in _MODULE_KINDS:
        return _MODULE_KINDS[name]
    forward = _forward_of(context, name)
    if forward is None:
        return None
    kinds = {
        produces(context, r.value, depth + 1)
        for r in ast.walk(forward)
        if isinstance(r, ast.Return) and r.value is not None
    }
    return kinds.pop() if len(kinds) == 1 else None


def _forward_of(context: LintContext, class_name: str) -> Optional[ast.FunctionDef]:
    for node in context.tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return item
    return None


def _bound_value(context: LintContext, target: ast.expr, use: ast.AST) -> Optional[ast.expr]:
    """The value bound to ``target`` (a name, or ``obj.attr`` assigned anywhere in the file):
    the latest assignment in the same function, else the file's only one."""
    if isinstance(target, ast.Name):
        value = latest_value(context, target.id, use)
        if value is not None:
            return value
    key = target_key(target)
    values = [a.value for a in context.assignments.get(key, ())] if key is not None else []
    return values[0] if len(values) == 1 else None
