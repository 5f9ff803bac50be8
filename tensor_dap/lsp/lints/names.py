"""What a name or an expression holds, as far as the source tells: an object's own attribute, a
plain Python value (a list, a string), a parameter of a model, and whether code runs in an init
function (where no autograd graph exists yet).

Checks ask these before judging: ``self.data = [...]`` in a ``Dataset`` is not ``Tensor.data``,
and ``m.weight.data.normal_(0, 0.02)`` in ``_init_weights`` is not a training step.
"""

from __future__ import annotations

import ast
import re
from typing import Optional, Union

from .ast_helpers import NO_GRAD, SCOPES, called_name, method_call
from .context import LintContext, walk_scope

Function = Union[ast.FunctionDef, ast.AsyncFunctionDef]

_PLAIN_VALUES = (
    ast.List,
    ast.ListComp,
    ast.Dict,
    ast.DictComp,
    ast.Set,
    ast.SetComp,
    ast.Tuple,
    ast.JoinedStr,
    ast.GeneratorExp,
)
_PLAIN_CALLS = {"list", "dict", "set", "tuple", "str", "sorted", "open", "len", "range", "zip"}
_INIT_NAME = re.compile(r"init|reset_param", re.IGNORECASE)
_PARAMETER_ATTRIBUTES = {"weight", "bias", "weight_ih", "weight_hh", "bias_ih", "bias_hh"}


def is_plain_value(value: ast.AST) -> bool:
    """Whether ``value`` makes a plain Python object, never a tensor: a list, dict, set or tuple
    display or comprehension, a string, ``None``, ``list(...)``, ``open(...)``..."""
    if isinstance(value, _PLAIN_VALUES):
        return True
    if isinstance(value, ast.Constant):
        return isinstance(value.value, (str, bytes)) or value.value is None
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id in _PLAIN_CALLS
    )


def is_own_attribute(node: ast.AST) -> bool:
    """``self.<x>`` / ``cls.<x>``: an attribute of the object a method runs on."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("self", "cls")
    )


def enclosing_function(context: LintContext, node: ast.AST) -> Optional[Function]:
    """The innermost function ``node`` is in, or None at module level."""
    for parent in context.ancestors(node):
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return parent
    return None


def applied_functions(context: LintContext) -> set[str]:
    """Names passed to ``<model>.apply(...)``: functions run once over every submodule."""
    found = set()
    for node in context.nodes:
        call = method_call(node, "apply")
        if call is not None and len(call.args) == 1 and isinstance(call.args[0], ast.Name):
            found.add(call.args[0].id)
    return found


def in_init_function(context: LintContext, node: ast.AST, applied: set[str]) -> bool:
    """Whether ``node`` runs while a model is being built: in ``__init__``, in a function named
    like an initialiser (``_init_weights``, ``weights_init``, ``reset_parameters``) or in one
    passed to ``model.apply(...)``."""
    function = enclosing_function(context, node)
    while function is not None:
        if _INIT_NAME.search(function.name) or function.name in applied:
            return True
        function = enclosing_function(context, function)
    return False


def _loop_over_parameters(loop: ast.AST, name: str) -> bool:
    """``for <name> in m.parameters()`` / ``for n, <name> in m.named_parameters()`` /
    ``for <name> in group["params"]``."""
    if not isinstance(loop, (ast.For, ast.AsyncFor, ast.comprehension)):
        return False
    target = loop.target
    names = [target] if isinstance(target, ast.Name) else []
    if isinstance(target, ast.Tuple):
        names = [e for e in target.elts if isinstance(e, ast.Name)]
    if not any(n.id == name for n in names):
        return False
    return "param" in ast.unparse(loop.iter).lower()


def _makes_parameter(value: ast.AST) -> bool:
    """``nn.Parameter(...)``, ``torch.randn(..., requires_grad=True)``, ``x.requires_grad_()``."""
    if not isinstance(value, ast.Call):
        return False
    if called_name(value) in ("Parameter", "requires_grad_"):
        return True
    return any(
        k.arg == "requires_grad" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in value.keywords
    )


def is_parameter(context: LintContext, node: ast.AST) -> bool:
    """Whether ``node`` is known to hold a tensor autograd tracks: ``m.weight`` / ``m.bias``, a
    loop variable over ``parameters()``, a name made by ``nn.Parameter`` or with
    ``requires_grad=True`` in the same function."""
    if isinstance(node, ast.Attribute):
        return node.attr in _PARAMETER_ATTRIBUTES
    if not isinstance(node, ast.Name):
        return False
    for parent in context.ancestors(node):
        if _loop_over_parameters(parent, node.id):
            return True
        if isinstance(parent, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)) and any(
            _loop_over_parameters(g, node.id) for g in parent.generators
        ):
            return True
        if isinstance(parent, (*SCOPES, ast.Module)):
            body = parent.body if not isinstance(parent, ast.Lambda) else []
            return any(
                isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == node.id for t in n.targets)
                and _makes_parameter(n.value)
                for n in walk_scope(body)
            )
    return False


def decorated_no_grad(function: Function) -> bool:
    """``@torch.no_grad()`` / ``@torch.inference_mode()`` on ``function``."""
    for decorator in function.decorator_list:
        name = called_name(decorator)
        if name is None and isinstance(decorator, ast.Attribute):
            name = decorator.attr
        if name in NO_GRAD:
            return True
    return False


def runs_without_grad(context: LintContext, node: ast.AST) -> bool:
    """Whether ``node`` runs with autograd off: under ``no_grad``/``inference_mode``, in a
    function decorated so, or in a function the file calls under ``no_grad``."""
    if context.in_no_grad(node):
        return True
    function = enclosing_function(context, node)
    while function is not None:
        if decorated_no_grad(function) or function.name in context.no_grad_callees:
            return True
        function = enclosing_function(context, function)
    return False


def scope_body(context: LintContext, node: ast.AST) -> list[ast.stmt]:
    """The statements of the function ``node`` is in (the module's at module level)."""
    function = enclosing_function(context, node)
    return function.body if function is not None else context.tree.body


def latest_value(context: LintContext, name: str, before: ast.AST) -> Optional[ast.expr]:
    """The value last assigned to ``name`` (``name = value``) in ``before``'s function, on a
    line before ``before``'s; None when there is none."""
    line = before.lineno  # type: ignore[attr-defined]
    function = enclosing_function(context, before)
    best: Optional[ast.Assign] = None
    for node in context.assignments.get(name, ()):
        if node.lineno >= line:
            break
        if enclosing_function(context, node) is function:
            best = node
    return best.value if best is not None else None


_NOT_FORWARD = {"next", "iter", "enumerate", "range", "len", "zip", "to", "cuda", "size", "item"}


def between_forward_and_backward(context: LintContext, node: ast.stmt) -> bool:
    """Whether ``node`` runs after a forward pass and before its backward, in its innermost
    loop (else its function): a value is computed by a call before it (``out = model(x)``) and
    ``.backward()`` comes after it, with no backward before it (a loop over ``parameters()``
    does not count as the loop). Only there can a graph that
    saved a tensor still be waiting for its backward: after ``backward()`` (a manual SGD step)
    the graph is freed, and before any forward (WGAN's clipping) there is none."""
    container: Optional[ast.AST] = None
    for parent in context.ancestors(node):
        if isinstance(parent, (ast.For, ast.AsyncFor)) and "param" in ast.unparse(parent.iter):
            continue  # ``for p in model.parameters()``: the step's own loop, not training's
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.While, *SCOPES, ast.Module)):
            container = parent
            break
    body = getattr(container, "body", None)
    if not isinstance(body, list):
        return False
    line = node.lineno
    backward_before = backward_after = forward_before = False
    for other in walk_scope(body):
        at = getattr(other, "lineno", 0)
        if method_call(other, "backward") is not None:
            backward_before |= at < line
            backward_after |= at > line
        elif (
            isinstance(other, ast.Assign)
            and at < line
            and isinstance(other.value, ast.Call)
            and called_name(other.value) not in _NOT_FORWARD
        ):
            forward_before = True
    return forward_before and backward_after and not backward_before
