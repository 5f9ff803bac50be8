"""``plain-tensor-attribute``: a module's tensor kept as a plain attribute in ``__init__``
(``self.mask = torch.tril(torch.ones(n, n))``, ``self.pe = pe`` of a positional table, a
diffusion schedule ``self.alphas_cumprod``) that ``forward`` (or a Lightning ``*_step``, or a
method they call) reads. ``model.to(device)`` moves parameters and buffers only: the forward
meets the attribute on the CPU (a device mismatch on the first batch), and ``state_dict`` and
``model.half()`` pass it over. ``register_buffer(name, tensor, persistent=False)`` moves it
with the model and keeps checkpoints as they were.

Only in a file that uses an accelerator (on the CPU alone nothing goes wrong); not for a 0-dim
tensor (``torch.tensor(1 / T)`` mixes with device tensors as a number does), an attribute the
class moves itself (``self.mask.to(x.device)``, ``torch.as_tensor(self.mean, device=...)``,
``self.mask = self.mask.to(...)`` in another method), registers, or only reads on the host
(``self.sizes.tolist()``, ``.shape``). The quick fix is offered only where it is safe: not for
an attribute assigned earlier (``self.table = None``), declared on the class, or set before
``super().__init__()``, where ``register_buffer`` raises. A tensor that is meant to be learned
(made with ``requires_grad=True``, given to ``nn.init``, or a ``torch.zeros``/``randn`` called as
learned tensors are: ViT's ``cls_token``, ``pos_embedding``, a prompt's ``prompts``) is fixed by
``nn.Parameter(...)`` instead: as a buffer it would move but never learn.
"""

from __future__ import annotations

import ast
from typing import Iterator, Mapping, Optional, Union

from tensor_dap.torch_names import LEARNED_INITIAL_VALUES, LEARNED_TENSOR_NAME

from .ast_helpers import factory_without_device, has_keyword, is_torch_call, span, uses_accelerator
from .context import LintContext
from .model import Edit, Lint, LintSpec

CODE = "plain-tensor-attribute"

#: methods that give a tensor another device (or the device of another tensor)
_MOVES = frozenset(["to", "cuda", "type", "type_as", "cpu"])
#: what a read of the attribute may be followed by and stay on the host
_HOST_READS = frozenset(
    ["tolist", "item", "numpy", "shape", "size", "dim", "device", "dtype", "numel", "ndim"]
)
#: factories of CPU tensors that take no ``device=`` (besides :func:`factory_without_device`'s)
_HOST_FACTORIES = frozenset(["from_numpy"])
#: factories that make a 0-dim tensor of one number: ``torch.tensor(0.07)``
_NUMBER_FACTORIES = frozenset(["tensor", "as_tensor", "scalar_tensor"])
#: how far a value is followed back (through names assigned in ``__init__`` and calls)
_DEPTH = 8

_Assignment = Union[ast.Assign, ast.AnnAssign]


def check(context: LintContext) -> Iterator[Lint]:
    accelerated = uses_accelerator(context.nodes)
    classes = [node for node in context.nodes if isinstance(node, ast.ClassDef)]
    parameter = _parameter_class(context.nodes)
    for cls, lightning in _module_classes(classes).items():
        # (a Lightning Trainer moves the model itself: no device in the file says so)
        if accelerated or lightning:
            yield from _class_lints(cls, parameter)


def _parameter_class(nodes: list[ast.AST]) -> str:
    """How the file can name ``nn.Parameter``: ``nn.Parameter`` where it imports ``nn``."""
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module == "torch":
            imported = [a.name for a in node.names if a.asname in (None, "nn")]
        elif isinstance(node, ast.Import):
            imported = ["nn" for a in node.names if a.name == "torch.nn" and a.asname == "nn"]
        else:
            continue
        if "nn" in imported:
            return "nn.Parameter"
    return "torch.nn.Parameter"


def _base_names(cls: ast.ClassDef) -> list[str]:
    return [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in cls.bases]


def _module_classes(classes: list[ast.ClassDef]) -> dict[ast.ClassDef, bool]:
    """The module classes (``class X(nn.Module)``, ``(pl.LightningModule)``, or a subclass of
    one defined in the file) -> whether it is a Lightning module."""
    found: dict[ast.ClassDef, bool] = {}
    grew = True
    while grew:
        grew = False
        named = {cls.name: lightning for cls, lightning in found.items()}
        for cls in classes:
            if cls in found:
                continue
            bases = _base_names(cls)
            if any(b.endswith("Module") or b in named for b in bases):
                lightning = any(b == "LightningModule" or named.get(b) for b in bases)
                found[cls] = lightning
                grew = True
    return found


def _class_lints(cls: ast.ClassDef, parameter: str) -> Iterator[Lint]:
    methods = {
        n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    init = methods.get("__init__")
    if init is None:
        return
    parents = {child: node for node in ast.walk(cls) for child in ast.iter_child_nodes(node)}
    others = [n for name, m in methods.items() if m is not init for n in ast.walk(m)]
    computing = [n for m in _computing(methods) for n in ast.walk(m)]
    registered = _registered_names(cls)
    for statement in ast.walk(init):
        if not isinstance(statement, (ast.Assign, ast.AnnAssign)):
            continue
        for target, value in _pairs(statement):
            name = _self_attribute(target)
            if name is None or name in registered:
                continue
            if _cpu_tensor(value, init, statement.lineno, 0) is None:
                continue
            later = [n for n in ast.walk(init) if getattr(n, "lineno", 0) > statement.lineno]
            if not _read(computing, name, parents) or _moved(others + later, name, parents):
                continue
            single = value is getattr(statement, "value", None)
            fixable = single and _fixable(cls, init, statement, name)
            learned = single and _learned(cls, statement, name)
            yield _lint(statement, target, name, fixable, parameter if learned else None)


def _learned(cls: ast.ClassDef, statement: ast.stmt, name: str) -> bool:
    """Whether the attribute is meant to be learned: its tensor is made with
    ``requires_grad=True`` (or ``.requires_grad_()``), an ``nn.init`` function fills it, or it
    is named and made as learned tensors are (``self.cls_token = torch.zeros(1, 1, dim)``)."""
    value = getattr(statement, "value", None)
    if isinstance(value, ast.Call):
        if any(k.arg == "dtype" and not _floating(k.value) for k in value.keywords):
            return False  # (token ids, a boolean mask: no gradient for them)
        if any(k.arg == "requires_grad" and _true(k.value) for k in value.keywords):
            return True
        if isinstance(value.func, ast.Attribute) and value.func.attr == "requires_grad_":
            return not value.args or _true(value.args[0])
    for node in ast.walk(cls):
        target = _target(node) if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Subscript) and _self_attribute(target.value) == name:
            return False  # (filled in place: a sin/cos table written through a slice)
        if isinstance(node, ast.Call) and node.args and _self_attribute(node.args[0]) == name:
            owner = node.func.value if isinstance(node.func, ast.Attribute) else None
            if isinstance(owner, ast.Attribute) and owner.attr == "init":
                return True  # nn.init.trunc_normal_(self.pos_embed, std=0.02)
            if isinstance(owner, ast.Name) and owner.id == "init":
                return True
    named = bool(LEARNED_TENSOR_NAME.search(name))
    return named and value is not None and is_torch_call(value, LEARNED_INITIAL_VALUES)


def _true(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _floating(node: ast.AST) -> bool:
    """Whether a ``dtype=`` is a floating one (``torch.float16``...; a name: not known, taken
    as one)."""
    dtype = node.attr if isinstance(node, ast.Attribute) else None
    return dtype is None or dtype.startswith(("float", "half", "double", "bfloat", "complex"))


def _pairs(statement: ast.AST) -> list[tuple[ast.expr, ast.expr]]:
    """(target, value) of an assignment: ``self.a = v``, ``self.a: T = v``, and each pair of
    ``self.sin, self.cos = a, b``."""
    target = _target(statement)
    value = getattr(statement, "value", None)
    if target is None or value is None:
        return []
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
        if len(target.elts) == len(value.elts):
            return list(zip(target.elts, value.elts))
        return []
    return [(target, value)]


def _target(statement: ast.AST) -> Optional[ast.expr]:
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        return statement.targets[0]
    if isinstance(statement, ast.AnnAssign) and statement.value is not None:
        return statement.target
    return None


def _computing(methods: Mapping[str, ast.AST]) -> list[ast.AST]:
    """The methods that run on the model's device: ``forward``, Lightning's steps, and the
    methods of the class they call (``self.q_sample(...)``), however deep; a ``denormalize``
    nothing of them calls may read a CPU attribute for plotting."""
    queue = [
        m
        for name, m in methods.items()
        if name in ("forward", "__call__") or name.endswith("_step")
    ]
    seen = {id(m) for m in queue}
    found = []
    while queue:
        method = queue.pop()
        found.append(method)
        for node in ast.walk(method):
            called = _self_attribute(node.func) if isinstance(node, ast.Call) else None
            callee = methods.get(called) if called else None
            if callee is not None and id(callee) not in seen:
                seen.add(id(callee))
                queue.append(callee)
    return found


def _self_attribute(node: ast.AST) -> Optional[str]:
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    ):
        return node.attr
    return None


def _registrations(scope: ast.AST) -> Iterator[tuple[str, ast.Call]]:
    """``(name, call)`` of each ``self.register_buffer("name", ...)`` (or
    ``register_parameter``) in ``scope``."""
    for node in ast.walk(scope):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("register_buffer", "register_parameter")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value, node


def _registered_names(cls: ast.ClassDef) -> set[str]:
    """Names registered as buffers or parameters anywhere in the class."""
    return {name for name, _ in _registrations(cls)}


def _cpu_tensor(value: ast.AST, init: ast.AST, before: int, depth: int) -> Optional[ast.Call]:
    """The factory call without ``device=`` that ``value`` is computed from, through method
    chains (``.view(...)``, ``.to(torch.float32)``), ``torch.*`` functions of it
    (``torch.tril(torch.ones(n, n))``), arithmetic and indexing (``1 - torch.linspace(...)``,
    ``torch.arange(n)[:, None]``), and names and attributes assigned earlier in ``__init__``
    (``pe = torch.zeros(...)``; ``self.pe = pe``; ``torch.cumprod(1 - self.betas, 0)``).
    None for a 0-dim tensor of one number."""
    if depth > _DEPTH:
        return None
    if (
        isinstance(value, ast.Call)
        and is_torch_call(value, _NUMBER_FACTORIES)
        and value.args
        and _one_number(value.args[0])
    ):
        return None  # (one number: a 0-dim tensor)
    factory = factory_without_device(value)
    if factory is not None:
        return factory
    if isinstance(value, ast.Call) and is_torch_call(value, _HOST_FACTORIES):
        return value
    if isinstance(value, (ast.Name, ast.Attribute)) and _named(value):
        assigned = _last_assignment(init, value, before)
        if assigned is None:
            registered = _registered_value(init, value, before)
            return _cpu_tensor(registered, init, before, depth + 1) if registered else None
        if assigned.value is None:
            return None
        return _cpu_tensor(assigned.value, init, assigned.lineno, depth + 1)
    if isinstance(value, ast.BinOp):
        return _cpu_tensor(value.left, init, before, depth + 1) or _cpu_tensor(
            value.right, init, before, depth + 1
        )
    if isinstance(value, (ast.Tuple, ast.List)):  # torch.cat((freqs, freqs), dim=-1)
        for element in value.elts:
            found = _cpu_tensor(element, init, before, depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(value, ast.UnaryOp):
        return _cpu_tensor(value.operand, init, before, depth + 1)
    if isinstance(value, ast.Subscript):
        return _cpu_tensor(value.value, init, before, depth + 1)
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Attribute):
        return None
    func = value.func
    if (func.attr in _MOVES and _gives_device(value)) or has_keyword(value, "device"):
        return None
    if isinstance(func.value, ast.Name) and func.value.id == "torch":  # torch.tril(...)
        for arg in value.args:
            found = _cpu_tensor(arg, init, before, depth + 1)
            if found is not None:
                return found
        return None
    return _cpu_tensor(func.value, init, before, depth + 1)  # a method of it: x.view(...)


def _registered_value(init: ast.AST, name: ast.AST, before: int) -> Optional[ast.AST]:
    """The tensor ``self.register_buffer("name", tensor)`` registered above line ``before``:
    made on the CPU, a buffer is there until the model moves, and what ``__init__`` computes
    from it (``torch.cumprod(1 - self.betas, 0)``) stays there."""
    attribute = _self_attribute(name)
    for registered, call in _registrations(init):
        if (
            registered == attribute
            and call.func.attr == "register_buffer"  # type: ignore[attr-defined]
            and len(call.args) > 1
            and call.lineno < before
        ):
            return call.args[1]
    return None


def _one_number(node: ast.AST, operand: bool = False) -> bool:
    """Whether ``torch.tensor(node)`` is one number: a numeric literal, ``math.*(...)``, and
    arithmetic of those and names (``1 / temperature``); a bare name may hold a list, and
    ``[1.0] * 9 + [3.0]`` does."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp):
        return _one_number(node.operand, operand)
    if isinstance(node, ast.BinOp):
        return _one_number(node.left, True) and _one_number(node.right, True)
    if isinstance(node, (ast.Name, ast.Attribute)):
        return operand
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return isinstance(node.func.value, ast.Name) and node.func.value.id == "math"
    return False


def _gives_device(call: ast.Call) -> bool:
    """Whether ``x.to(...)``/``x.cuda()``... may change the device: not ``.to(torch.float32)``
    or ``.to(dtype=...)`` alone."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr != "to":
        return True
    if any(k.arg in ("device", None) for k in call.keywords):
        return True
    return any(not _is_dtype(arg) for arg in call.args)


def _is_dtype(node: ast.AST) -> bool:
    """``torch.float32``, ``torch.long``... (a dtype of ``torch``)."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "torch"
        and (
            node.attr.startswith(("float", "int", "uint", "bfloat", "complex"))
            or node.attr in ("long", "half", "double", "bool", "short")
        )
    )


def _named(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) or _self_attribute(node) is not None


def _same_target(target: ast.AST, name: ast.AST) -> bool:
    if isinstance(name, ast.Name):
        return isinstance(target, ast.Name) and target.id == name.id
    return _self_attribute(target) is not None and _self_attribute(target) == _self_attribute(name)


def _last_assignment(init: ast.AST, name: ast.AST, before: int) -> Optional[_Assignment]:
    """The last ``name = ...`` (or ``self.name = ...``) in ``__init__`` above line ``before``;
    None when ``name`` is also bound otherwise (a loop, ``+=``: its value is not known)."""
    found: Optional[_Assignment] = None
    for node in ast.walk(init):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.lineno < before:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_same_target(t, name) for t in targets) and (
                found is None or node.lineno > found.lineno
            ):
                found = node
        elif _binds(node, name):
            return None
    return found


def _binds(node: ast.AST, name: ast.AST) -> bool:
    """Whether ``node`` binds ``name`` other than by ``=`` (a loop, ``+=``, ``with ... as``)."""
    if isinstance(node, (ast.AugAssign, ast.For)):
        return _same_target(node.target, name)
    if isinstance(node, ast.With):
        return any(
            i.optional_vars is not None and _same_target(i.optional_vars, name) for i in node.items
        )
    return False


def _read(nodes: list[ast.AST], name: str, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether ``nodes`` read ``self.<name>`` where it meets other tensors: not only for its
    metadata or numbers (``.shape``, ``.tolist()``), nor made anew on a device
    (``torch.as_tensor(self.mean, device=x.device)``)."""
    for node in nodes:
        if not (
            isinstance(node, ast.Attribute)
            and _self_attribute(node) == name
            and isinstance(node.ctx, ast.Load)
        ):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.attr in _HOST_READS:
            continue
        if _indexes(node, parents):  # (x[:, self.idx]: a CPU index works on any device)
            continue
        if _moved_by_name(node, parents):  # w = self.w; w = w.to(x.device)
            continue
        if isinstance(parent, ast.Call) and (
            has_keyword(parent, "device")
            or (isinstance(parent.func, ast.Name) and parent.func.id == "len")
        ):
            continue
        return True
    return False


def _indexes(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether ``node`` is (in) the index of a subscript: ``x[:, self.idx]``."""
    child, parent = node, parents.get(node)
    while isinstance(parent, (ast.Tuple, ast.Slice)):
        child, parent = parent, parents.get(parent)
    return isinstance(parent, ast.Subscript) and parent.slice is child


def _moved_by_name(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """``w = self.w`` followed, in the same function, by a move of ``w``."""
    assign = parents.get(node)
    if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1):
        return False
    target = assign.targets[0]
    if not isinstance(target, ast.Name):
        return False
    function = parents.get(assign)
    while function is not None and not isinstance(
        function, (ast.FunctionDef, ast.AsyncFunctionDef)
    ):
        function = parents.get(function)
    return function is not None and any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in _MOVES
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == target.id
        and _gives_device(n)
        for n in ast.walk(function)
    )


def _moved(nodes: list[ast.AST], name: str, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether another method moves it (``self.mask.to(x.device)``, whose result is used) or
    assigns it anew."""
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
            and _gives_device(node)
            and not isinstance(parents.get(node), ast.Expr)  # (`self.prior.to(dev)` alone)
        ):
            return True
    return False


def _fixable(cls: ast.ClassDef, init: ast.AST, statement: ast.stmt, name: str) -> bool:
    """Whether ``register_buffer`` can replace the assignment: it raises for a name the
    object already has (a class attribute, ``self.table = None`` before) and before
    ``super().__init__()``."""
    for node in cls.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return False
    for other in ast.walk(init):
        target = _target(other)
        if (
            target is not None
            and other is not statement
            and _self_attribute(target) == name
            and getattr(other, "lineno", 0) < statement.lineno
        ):
            return False
    calls = [
        n.lineno
        for n in ast.walk(init)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "__init__"
    ]
    return bool(calls) and min(calls) < statement.lineno


def _lint(
    statement: ast.stmt, target: ast.expr, name: str, fixable: bool, parameter: Optional[str]
) -> Lint:
    """``parameter``: how the file names ``nn.Parameter``, for a tensor meant to be learned."""
    value = getattr(statement, "value", None)
    assert value is not None
    line, col, end_line, end_col = span(statement)
    tline, tcol, _, tend_col = span(target)
    vline, vcol, vend_line, vend_col = span(value)
    # (the value's own text stays as written: the edits replace what is around it)
    stays = (
        f"`self.{name}` is a plain tensor attribute, made on the CPU: `model.to(device)` moves "
        f"parameters and buffers, not it, so the forward meets it on the CPU (a device mismatch)"
    )
    if parameter is not None:
        message = (
            f"{stays}, and `model.parameters()` leaves it out, so the optimizer never trains "
            f"it. Make it a parameter: `self.{name} = {parameter}(...)`."
        )
        title = f"Make it a parameter: `self.{name} = {parameter}(...)`"
        edits = (
            Edit(vline, vcol, vline, vcol, f"{parameter}("),
            Edit(vend_line, vend_col, vend_line, vend_col, ")"),
        )
    else:
        message = (
            f'{stays}. Register it as a buffer: `self.register_buffer("{name}", ..., '
            f"persistent=False)` moves it with the model and leaves checkpoints as they are "
            f"(or wrap it in `nn.Parameter(...)` if it is to be learned)."
        )
        title = f'Register it: `self.register_buffer("{name}", ..., persistent=False)`'
        edits = (
            Edit(line, col, vline, vcol, f'self.register_buffer("{name}", '),
            Edit(vend_line, vend_col, end_line, end_col, ", persistent=False)"),
        )
    return Lint(
        CODE,
        message,
        tline,
        tcol,
        tline,
        tend_col,
        fix_title=title if fixable else None,
        edits=edits if fixable else (),
    )


SPEC = LintSpec(
    CODE,
    "warning",
    "a tensor kept as a plain attribute of a module in `__init__`, which `model.to(device)` "
    "leaves on the CPU",
    check,
    needs=("self.", "Module"),
)
