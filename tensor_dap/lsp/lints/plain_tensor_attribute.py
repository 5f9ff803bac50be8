"""``plain-tensor-attribute``: a module's tensor kept as a plain attribute in ``__init__``
(``self.mask = torch.tril(torch.ones(n, n))``, ``self.pe = pe`` of a positional table) that
``forward`` (or a Lightning ``*_step``) reads. ``model.to(device)`` moves parameters and
buffers only: the forward meets the attribute on the CPU (a device mismatch on the first
batch), and ``state_dict`` and ``model.half()`` pass it over.
``register_buffer(name, tensor, persistent=False)`` moves it with the model and keeps
checkpoints as they were.

Only in a file that uses an accelerator (on the CPU alone nothing goes wrong), and not for an
attribute the class moves itself (``self.mask.to(x.device)``, ``self.mask = self.mask.to(...)``
in another method) or registers.
"""

from __future__ import annotations

import ast
from typing import Iterator, Optional

from .ast_helpers import factory_without_device, span, uses_accelerator
from .context import LintContext
from .model import Edit, Lint, LintSpec

CODE = "plain-tensor-attribute"

#: methods that give a tensor another device (or the device of another tensor)
_MOVES = frozenset(["to", "cuda", "type", "type_as", "cpu"])
#: how far a value is followed back (through names assigned in ``__init__`` and calls)
_DEPTH = 6


def check(context: LintContext) -> Iterator[Lint]:
    if not uses_accelerator(context.nodes):
        return
    for node in context.nodes:
        if isinstance(node, ast.ClassDef) and _is_module(node):
            yield from _class_lints(node)


def _is_module(cls: ast.ClassDef) -> bool:
    """``class X(nn.Module)``, ``(torch.nn.Module)``, ``(pl.LightningModule)``..."""
    for base in cls.bases:
        name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
        if name.endswith("Module"):
            return True
    return False


def _class_lints(cls: ast.ClassDef) -> Iterator[Lint]:
    methods = [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    init = next((m for m in methods if m.name == "__init__"), None)
    if init is None:
        return
    others = [n for m in methods if m is not init for n in ast.walk(m)]
    computing = [n for m in methods if _computes(m.name) for n in ast.walk(m)]
    registered = _registered_names(cls)
    for statement in ast.walk(init):
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            continue
        name = _self_attribute(statement.targets[0])
        if name is None or name in registered:
            continue
        if _cpu_tensor(statement.value, init, statement.lineno, 0) is None:
            continue
        if not _read(computing, name) or _moved(others, name):
            continue
        yield _lint(statement, name)


def _computes(method: str) -> bool:
    """The methods that run on the model's device: ``forward`` and Lightning's steps (a
    ``denormalize`` for plotting on the CPU may read a CPU attribute)."""
    return method in ("forward", "__call__") or method.endswith("_step")


def _self_attribute(node: ast.AST) -> Optional[str]:
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    ):
        return node.attr
    return None


def _registered_names(cls: ast.ClassDef) -> set[str]:
    """Names given to ``self.register_buffer("name", ...)`` anywhere in the class."""
    names = set()
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("register_buffer", "register_parameter")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


def _cpu_tensor(value: ast.AST, init: ast.AST, before: int, depth: int) -> Optional[ast.Call]:
    """The factory call without ``device=`` that ``value`` is computed from, through method
    chains (``.view(...)``), ``torch.*`` functions of it (``torch.tril(torch.ones(n, n))``) and
    names assigned earlier in ``__init__`` (``pe = torch.zeros(...)``; ``self.pe = pe``)."""
    if depth > _DEPTH:
        return None
    factory = factory_without_device(value)
    if factory is not None:
        return factory
    if isinstance(value, ast.Name):
        assigned = _last_assignment(init, value.id, before)
        return _cpu_tensor(assigned.value, init, assigned.lineno, depth + 1) if assigned else None
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Attribute):
        return None
    func = value.func
    if func.attr in _MOVES or any(k.arg == "device" for k in value.keywords):
        return None
    if isinstance(func.value, ast.Name) and func.value.id == "torch":  # torch.tril(...)
        for arg in value.args[:1]:
            return _cpu_tensor(arg, init, before, depth + 1)
        return None
    return _cpu_tensor(func.value, init, before, depth + 1)  # a method of it: x.view(...)


def _last_assignment(init: ast.AST, name: str, before: int) -> Optional[ast.Assign]:
    """The last ``name = ...`` in ``__init__`` above line ``before``; None when ``name`` is
    also written otherwise (``pe[:, 0::2] = ...`` is fine: an element write)."""
    found = None
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and node.lineno < before:
            for target in node.targets:
                if (
                    isinstance(target, ast.Name)
                    and target.id == name
                    and (found is None or node.lineno > found.lineno)
                ):
                    found = node
        elif isinstance(node, (ast.AugAssign, ast.For, ast.With)) and _binds(node, name):
            return None
    return found


def _binds(node: ast.AST, name: str) -> bool:
    targets = (
        [node.target]
        if isinstance(node, (ast.AugAssign, ast.For))
        else [i.optional_vars for i in getattr(node, "items", []) if i.optional_vars]
    )
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)


def _read(nodes: list[ast.AST], name: str) -> bool:
    return any(
        isinstance(n, ast.Attribute) and _self_attribute(n) == name and isinstance(n.ctx, ast.Load)
        for n in nodes
    )


def _moved(nodes: list[ast.AST], name: str) -> bool:
    """Whether another method moves it (``self.mask.to(x.device)``) or assigns it anew."""
    for node in nodes:
        if (
            isinstance(node, ast.Attribute)
            and _self_attribute(node) == name
            and isinstance(node.ctx, ast.Store)
        ):
            return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _MOVES
            and _self_attribute(node.func.value) == name
        ):
            return True
    return False


def _lint(statement: ast.Assign, name: str) -> Lint:
    value = statement.value
    line, col, end_line, end_col = span(statement)
    vline, vcol, vend_line, vend_col = span(value)
    # (the value's own text stays as written: the edits replace what is around it)
    edits = (
        Edit(line, col, vline, vcol, f'self.register_buffer("{name}", '),
        Edit(vend_line, vend_col, end_line, end_col, ", persistent=False)"),
    )
    return Lint(
        CODE,
        f"`self.{name}` is a plain tensor attribute, made on the CPU: `model.to(device)` moves "
        f"parameters and buffers, not it, so the forward meets it on the CPU (a device "
        f'mismatch). Register it as a buffer: `self.register_buffer("{name}", ..., '
        f"persistent=False)` moves it with the model and leaves checkpoints as they are (or "
        f"wrap it in `nn.Parameter(...)` if it is to be learned).",
        line,
        col,
        line,
        end_col if end_line == line else col + len(f"self.{name}"),
        fix_title=f'Register it: `self.register_buffer("{name}", ..., persistent=False)`',
        edits=edits,
    )


SPEC = LintSpec(
    CODE,
    "warning",
    "a tensor kept as a plain attribute of a module in `__init__`, which `model.to(device)` "
    "leaves on the CPU",
    check,
    needs=("self.", "Module"),
)
