"""Shared questions about ``ast`` nodes: what a call calls (``torch.<name>(...)``,
``<x>.<method>(...)``), whether a keyword is passed, where a node is, and the torch factory
calls that make a tensor without ``device=``.
"""

from __future__ import annotations

import ast
from typing import AbstractSet, Iterable, Optional, Union

from tensor_dap.device_fix import device_in_fix, device_variable
from tensor_dap.torch_names import CPU_UNLESS_TOLD

"""``torch.<name>(...)`` calls that make a tensor from a shape or values."""

NO_GRAD = {"no_grad", "inference_mode"}
"""Context managers (and decorators) under which no autograd graph is recorded."""

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
LOOPS = (ast.For, ast.AsyncFor, ast.While)


def called_name(node: ast.AST) -> Optional[str]:
    """``torch.no_grad()`` / ``no_grad()`` -> ``no_grad``."""
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            return func.attr
        if isinstance(func, ast.Name):
            return func.id
    return None


def is_torch_call(node: ast.AST, names: AbstractSet[str]) -> bool:
    """``torch.<name>(...)`` with ``name`` in ``names``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "torch"
        and node.func.attr in names
    )


def has_keyword(call: ast.Call, name: str) -> bool:
    """Whether ``call`` passes ``name=`` (or ``**kwargs``, which may)."""
    return any(k.arg == name or k.arg is None for k in call.keywords)


def method_call(node: ast.AST, name: str) -> Optional[ast.Call]:
    """``<receiver>.<name>(...)`` -> the call, else None."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == name
    ):
        return node
    return None


def names_in(*nodes: ast.AST) -> set[str]:
    """Every name read or written in ``nodes`` (``x``, ``y`` of ``f(x).y + y``)."""
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}


def backward_names(nodes: Iterable[ast.AST]) -> set[str]:
    """Names whose value reaches a ``.backward()`` call among ``nodes``: ``loss.backward()``,
    ``(total / k).backward()``, ``scaler.scale(loss).backward()``."""
    found: set[str] = set()
    for node in nodes:
        call = method_call(node, "backward")
        if call is not None:
            assert isinstance(call.func, ast.Attribute)
            found |= names_in(call.func.value)
    return found


def span(node: ast.AST) -> tuple[int, int, int, int]:
    """``node``'s ``line, col, end_line, end_col`` (1-based lines, UTF-8 byte columns)."""
    return (
        node.lineno,  # type: ignore[attr-defined]
        node.col_offset,  # type: ignore[attr-defined]
        node.end_lineno or node.lineno,  # type: ignore[attr-defined]
        node.end_col_offset or 0,  # type: ignore[attr-defined]
    )


def device_expression(tree: Union[ast.Module, list[ast.AST]]) -> str:
    """How a fix in this file names the device, as every fix does (:func:`device_in_fix`):
    ``device`` when the file binds that name, else ``"cuda"`` (statically, no index is known)."""
    nodes = tree if isinstance(tree, list) else ast.walk(tree)
    return device_in_fix("cuda", variable=device_variable(nodes))


def uses_accelerator(nodes: list[ast.AST]) -> bool:
    """Whether the file moves or makes tensors on a device (so that CPU tensors may mix)."""
    for node in nodes:
        if isinstance(node, ast.keyword) and node.arg == "device":
            return True
        if isinstance(node, ast.Attribute) and node.attr in ("cuda", "to"):
            return True
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith(("cuda", "mps", "xpu"))
        ):
            return True
    return False


def factory_without_device(node: ast.AST) -> Optional[ast.Call]:
    """The ``torch.zeros(...)`` / ``torch.Tensor([...])`` call without ``device=`` that makes
    ``node``'s value, through chained calls like ``.float()``; None if the chain moves it
    (``.to()``, ``.cuda()``) or it is no such factory."""
    while isinstance(node, ast.Call):
        if is_torch_call(node, CPU_UNLESS_TOLD):
            return None if has_keyword(node, "device") else node
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr in ("to", "cuda", "type"):
            return None
        node = func.value
    return None


def is_literal(node: ast.AST) -> bool:
    """Numbers, and tuples or lists of them (a small constant shape or value)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp):
        return is_literal(node.operand)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(is_literal(e) for e in node.elts)
    return False


def adds_tensor(value: ast.AST) -> bool:
    """Whether an added value may be a tensor: not a number, ``x.item()``, ``float(x)``."""
    if isinstance(value, ast.Constant):
        return False
    if isinstance(value, ast.Call):
        if method_call(value, "item") or method_call(value, "tolist"):
            return False
        if isinstance(value.func, ast.Name) and value.func.id in ("float", "int", "len"):
            return False
    return not (isinstance(value, ast.UnaryOp) and isinstance(value.operand, ast.Constant))


def accumulated(node: ast.AST) -> Optional[tuple[str, ast.expr]]:
    """``name += x`` / ``name = name + x`` / ``name = x + name`` (x maybe a tensor) -> the name
    and ``x``, else None."""
    if (
        isinstance(node, ast.AugAssign)
        and isinstance(node.op, ast.Add)
        and isinstance(node.target, ast.Name)
        and adds_tensor(node.value)
    ):
        return node.target.id, node.value
    if (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.BinOp)
        and isinstance(node.value.op, ast.Add)
    ):
        name = node.targets[0].id
        left, right = node.value.left, node.value.right
        other = right if isinstance(left, ast.Name) and left.id == name else None
        if other is None and isinstance(right, ast.Name) and right.id == name:
            other = left
        if other is not None and adds_tensor(other):
            return name, other
    return None
