"""``penalty-as-number``: a value made of ``torch.autograd.grad(..., create_graph=True)``'s
gradients turned into a Python number where it goes into a loss: returned as
``penalty.item()`` / ``float(penalty)`` (a WGAN-GP helper), or used in arithmetic as one
(``d_loss + 10 * gp.item()``, or a name assigned that number and then added into a loss that is
backpropagated). ``create_graph=True`` is there so that a ``backward()`` goes through the
gradients; a number adds a constant and the penalty trains nothing. The source-only twin of
the ``grad-lost`` rule's check (:mod:`tensor_dap.agent.rules._penalty_as_number`).

Silent on ``.item()`` for logging (a print, a dict of floats, a running sum with ``+=``).
"""

from __future__ import annotations

import ast
from typing import Iterator, Optional

from .ast_helpers import backward_names, called_name, names_in, span
from .context import LintContext, walk_scope
from .model import Edit, Lint, LintSpec

CODE = "penalty-as-number"
#: what turns a tensor into Python numbers, as a method or (``float``) a builtin
_METHODS = frozenset({"item", "tolist"})


def _creates_graph(call: ast.Call) -> bool:
    """``torch.autograd.grad(..., create_graph=True)``, ``autograd.grad(...)`` or ``grad(...)``
    with ``create_graph`` not a literal false."""
    if called_name(call) != "grad":
        return False
    if isinstance(call.func, ast.Attribute) and not ast.unparse(call.func.value).endswith(
        "autograd"
    ):
        return False
    for keyword in call.keywords:
        if keyword.arg == "create_graph":
            value = keyword.value
            return not (isinstance(value, ast.Constant) and not value.value)
    return False


def _number_of(node: ast.AST, made: set[str]) -> Optional[ast.expr]:
    """The tensor expression ``node`` turns into a number when it is ``x.item()``,
    ``x.tolist()`` or ``float(x)`` of a value made of the gradients (names in ``made``)."""
    if not isinstance(node, ast.Call) or node.keywords:
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in _METHODS and not node.args:
        inner: ast.expr = func.value
    elif isinstance(func, ast.Name) and func.id == "float" and len(node.args) == 1:
        inner = node.args[0]
    else:
        return None
    return inner if names_in(inner) & made else None


def _check_scope(scope: list[ast.stmt]) -> Iterator[Lint]:
    made: set[str] = set()  # names holding the gradients or values made of them
    numbers: dict[str, ast.Call] = {}  # name -> the call that made it a number
    arithmetic: list[tuple[ast.BinOp, set[str]]] = []
    computed: set[str] = set()  # names assigned something a call made (tensors, most often)
    statements = sorted(
        (n for n in walk_scope(scope) if isinstance(n, ast.stmt)),
        key=lambda n: (n.lineno, n.col_offset),
    )
    found: list[ast.Call] = []
    for statement in statements:
        if isinstance(statement, ast.Assign):
            value, targets = statement.value, statement.targets
            calls = [n for n in ast.walk(value) if isinstance(n, ast.Call)]
            stored = set().union(*(names_in(t) for t in targets))
            if calls:
                computed |= stored
            if any(_creates_graph(call) for call in calls) or names_in(value) & made:
                if isinstance(value, ast.Call) and _number_of(value, made) is not None:
                    numbers.update(dict.fromkeys(stored, value))
                else:
                    made |= stored
            if isinstance(value, ast.BinOp):
                arithmetic.append((value, stored))
        elif isinstance(statement, ast.AugAssign) and names_in(statement.value) & made:
            made |= names_in(statement.target)  # (`norm += g.pow(2).sum()`)
        elif isinstance(statement, (ast.For, ast.AsyncFor)) and names_in(statement.iter) & made:
            made |= names_in(statement.target)  # (`for g in grads:`)
        elif isinstance(statement, ast.Return) and statement.value is not None:
            value = statement.value
            items = value.elts if isinstance(value, ast.Tuple) else [value]
            found.extend(
                item for item in items if isinstance(item, ast.Call) and _number_of(item, made)
            )
    backpropagated = backward_names(walk_scope(scope))
    for operation, stored in arithmetic:
        if not stored & backpropagated:
            continue
        for term in _operands(operation, _SUM):
            number = _number_in(term, made, numbers, computed)
            if number is not None:
                found.append(number)
    seen: set[int] = set()
    for call in found:
        if id(call) not in seen:
            seen.add(id(call))
            yield _lint(call)


def _operands(node: ast.expr, ops: tuple[type[ast.operator], ...]) -> Iterator[ast.expr]:
    """The operands of a chain of ``ops``: the terms of a sum (``a + 10 * b - c`` -> ``a``,
    ``10 * b``, ``c`` for Add and Sub), the factors of a product (``gamma / 2 * r1``)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ops):
        yield from _operands(node.left, ops)
        yield from _operands(node.right, ops)
    else:
        yield node


_SUM = (ast.Add, ast.Sub)
_PRODUCT = (ast.Mult, ast.Div)


def _number_in(
    term: ast.expr, made: set[str], numbers: dict[str, ast.Call], computed: set[str]
) -> Optional[ast.Call]:
    """The call that made the penalty a number when ``term`` is that number times
    coefficients (literals, attributes such as ``self.lambda_gp``, names no call made): a
    constant term of the loss. A number weighting a tensor (``lam * loss_r``, an adaptive
    weight read with ``.item()`` on purpose) is no penalty."""
    number: Optional[ast.Call] = None
    for factor in _operands(term, _PRODUCT):
        if isinstance(factor, ast.Call) and _number_of(factor, made) is not None:
            found: Optional[ast.Call] = factor
        elif isinstance(factor, ast.Name) and factor.id in numbers:
            found = numbers[factor.id]
        else:
            if isinstance(factor, ast.Name) and factor.id in computed:
                return None  # (a tensor, most likely: the number weights it)
            if not isinstance(factor, (ast.Constant, ast.Attribute, ast.Name, ast.UnaryOp)):
                return None
            continue
        if number is not None:
            return None
        number = found
    return number


def _lint(call: ast.Call) -> Lint:
    func = call.func
    if isinstance(func, ast.Attribute):
        shown, inner = f".{func.attr}()", func.value
    else:
        shown, inner = "float()", call.args[0]
    edits: tuple[Edit, ...] = ()
    if shown != ".tolist()":
        edits = (Edit(*span(call), ast.unparse(inner)),)
    return Lint(
        CODE,
        f"{shown} turns a value made of torch.autograd.grad(..., create_graph=True)'s "
        "gradients into a Python number where it goes into a loss: the backward() does not go "
        "through the gradients, so the penalty adds a constant and trains nothing. Keep it a "
        f"tensor; call {shown} only to log it.",
        *span(call),
        fix_title=f"Keep the tensor (leave out {shown})" if edits else None,
        edits=edits,
    )


def check(context: LintContext) -> Iterator[Lint]:
    for scope in context.scopes():
        yield from _check_scope(scope)


SPEC = LintSpec(
    CODE,
    "warning",
    "a create_graph=True gradient penalty turned into a number (.item(), float()) for the loss",
    check,
    needs=("create_graph", "item|float|tolist"),
)
