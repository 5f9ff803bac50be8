"""Static lints for ``textDocument/publishDiagnostics``: known PyTorch pitfalls found in the
source alone, without a run.

Pure functions over the source text (:func:`lint`), so they are unit-testable; the diagnostics
feature publishes them next to the findings of the last run, and the code action feature turns
their :class:`Edit` lists into quick fixes. Codes:

- ``cpu-accumulator``: a float accumulator made without a device (``torch.zeros(1)``,
  ``torch.tensor(0.0)``, ``torch.Tensor([0.0])``) that a loop then adds tensors to, in a file that
  uses an accelerator. Adding Python numbers (``total += loss.item()``) is fine.
- ``load-without-map-location``: ``torch.load(...)`` without ``map_location``.
- ``missing-zero-grad``: a loop calling ``.backward()`` and ``.step()`` that never zeroes the
  gradients in its body (``zero_grad()``, ``p.grad = None``, ``p.grad.zero_()`` anywhere in it).
- ``data-write``: ``p.data = ...``, ``p.data -= ...``, ``p.data.add_(...)`` outside
  ``torch.no_grad()`` (``p.grad.data`` and reads like ``p.data.clone()`` are fine).
- ``leaf-rebound``: a tensor made with ``requires_grad=True`` rebound by ``w = w - ...`` outside
  ``torch.no_grad()``.

Positions are the ``ast``'s: 1-based lines, UTF-8 byte columns. A source that does not parse
has no lints. Each check errs on the side of silence: none may flag a correct idiom.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator, Optional, Union

from tensor_dap.device_fix import device_in_fix, device_variable

CPU_ACCUMULATOR = "cpu-accumulator"
LOAD_WITHOUT_MAP_LOCATION = "load-without-map-location"
MISSING_ZERO_GRAD = "missing-zero-grad"
DATA_WRITE = "data-write"
LEAF_REBOUND = "leaf-rebound"

MAX_SOURCE = 2_000_000
"""Sources longer than this (characters) are not linted."""

_FACTORIES = {"zeros", "ones", "tensor", "Tensor", "empty", "full", "FloatTensor"}
_SCALAR_ACCUMULATORS = {"zeros", "ones", "tensor", "Tensor", "empty", "full"}
_NO_GRAD = {"no_grad", "inference_mode"}
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


@dataclass(frozen=True)
class Edit:
    """Replace ``line:col`` .. ``end_line:end_col`` (1-based lines, byte columns) by ``text``."""

    line: int
    col: int
    end_line: int
    end_col: int
    text: str


@dataclass(frozen=True)
class Lint:
    """One static finding over ``line:col`` .. ``end_line:end_col``, with an optional fix."""

    code: str
    message: str
    line: int
    col: int
    end_line: int
    end_col: int
    fix_title: Optional[str] = None
    edits: tuple[Edit, ...] = ()


def parse(source: str) -> Optional[ast.Module]:
    """The module's tree, or None when it does not parse (or is too big to lint)."""
    if len(source) > MAX_SOURCE:
        return None
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def lint(source: str, tree: Optional[ast.Module] = None) -> list[Lint]:
    """Every static lint of ``source``, in source order."""
    tree = tree if tree is not None else parse(source)
    if tree is None:
        return []
    context = _Context(tree, source)
    found: list[Lint] = []
    # each check only where the source names what it looks for (cheap on big files)
    if "torch" in source and ("for" in source or "while" in source):
        found.extend(cpu_accumulators(context))
    if "load" in source:
        found.extend(loads_without_map_location(context))
    if "backward" in source and "step" in source:
        found.extend(missing_zero_grads(context))
    if ".data" in source:
        found.extend(data_writes(context))
    if "requires_grad" in source:
        found.extend(leaf_rebounds(context))
    return sorted(found, key=lambda f: (f.line, f.col, f.code))


# -- helpers -----------------------------------------------------------------------------------


class _Context:
    """The tree with parent links, and what several checks ask of it."""

    def __init__(self, tree: ast.Module, source: str) -> None:
        self.tree = tree
        self.lines = source.splitlines()
        self.nodes = list(ast.walk(tree))
        self._parents: Optional[dict[ast.AST, ast.AST]] = None
        self.device = device_expression(self.nodes)

    @property
    def parents(self) -> dict[ast.AST, ast.AST]:
        if self._parents is None:
            self._parents = {}
            for node in self.nodes:
                for child in ast.iter_child_nodes(node):
                    self._parents[child] = node
        return self._parents

    def line_bytes(self, number: int) -> bytes:
        """Line ``number`` (1-based) as UTF-8, the unit of ``ast`` columns."""
        return self.lines[number - 1].encode("utf-8") if 0 < number <= len(self.lines) else b""

    def segment(self, node: ast.AST) -> str:
        """``node``'s source text (``ast.unparse`` for nodes over several lines)."""
        line, col, end_line, end = _span(node)
        if line != end_line:
            return ast.unparse(node)
        return self.line_bytes(line)[col:end].decode("utf-8", errors="replace")

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parents:
            node = self.parents[node]
            yield node

    def in_no_grad(self, node: ast.AST) -> bool:
        """Whether ``node`` runs inside ``with torch.no_grad():`` (or ``inference_mode``)."""
        for parent in self.ancestors(node):
            if isinstance(parent, _SCOPES):
                return False
            if isinstance(parent, (ast.With, ast.AsyncWith)) and any(
                _called_name(item.context_expr) in _NO_GRAD for item in parent.items
            ):
                return True
        return False

    def scopes(self) -> Iterator[list[ast.stmt]]:
        """The statement lists of the module and of every function."""
        yield self.tree.body
        for node in self.nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield node.body


def walk_scope(nodes: Union[ast.AST, list[ast.stmt]]) -> Iterator[ast.AST]:
    """Like ``ast.walk`` but not into nested functions, classes and lambdas."""
    todo: list[ast.AST] = list(nodes) if isinstance(nodes, list) else [nodes]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, _SCOPES))


def _called_name(node: ast.AST) -> Optional[str]:
    """``torch.no_grad()`` / ``no_grad()`` -> ``no_grad``."""
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            return func.attr
        if isinstance(func, ast.Name):
            return func.id
    return None


def _is_torch_call(node: ast.AST, names: set[str]) -> bool:
    """``torch.<name>(...)`` with ``name`` in ``names``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "torch"
        and node.func.attr in names
    )


def _has_keyword(call: ast.Call, name: str) -> bool:
    return any(k.arg == name or k.arg is None for k in call.keywords)


def _method_call(node: ast.AST, name: str) -> Optional[ast.Call]:
    """``<receiver>.<name>(...)`` -> the call, else None."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == name
    ):
        return node
    return None


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


def add_keyword_edit(call: ast.Call, text: str) -> Edit:
    """The edit adding ``text`` (``device=device``) as the last argument of ``call``."""
    args: list[ast.AST] = [*call.args, *call.keywords]
    if args:
        last = max(args, key=lambda a: (a.end_lineno or 0, a.end_col_offset or 0))
        line, col = last.end_lineno or call.lineno, last.end_col_offset or 0
        return Edit(line, col, line, col, f", {text}")
    line, col = call.end_lineno or call.lineno, (call.end_col_offset or 1) - 1
    return Edit(line, col, line, col, text)


def device_fix(call: ast.Call, device: str) -> tuple[str, tuple[Edit, ...]]:
    """The title and edits adding ``device=`` to a factory call. The legacy ``torch.Tensor``
    constructor takes no CUDA device, so it becomes ``torch.tensor`` (with float32 kept)."""
    edits = []
    extra = f"device={device}"
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in ("Tensor", "FloatTensor"):
        end = func.end_col_offset or 0
        start = end - len(func.attr)
        edits.append(
            Edit(func.end_lineno or call.lineno, start, func.end_lineno or 0, end, "tensor")
        )
        floats = all(
            isinstance(n, ast.Constant) and isinstance(n.value, float)
            for a in call.args
            for n in ast.walk(a)
            if isinstance(n, ast.Constant)
        )
        if not floats and not _has_keyword(call, "dtype"):
            extra = f"dtype=torch.float32, {extra}"
    edits.append(add_keyword_edit(call, extra))
    return f"Create it on the device: add `{extra}`", tuple(edits)


def _span(node: ast.AST) -> tuple[int, int, int, int]:
    return (
        node.lineno,  # type: ignore[attr-defined]
        node.col_offset,  # type: ignore[attr-defined]
        node.end_lineno or node.lineno,  # type: ignore[attr-defined]
        node.end_col_offset or 0,  # type: ignore[attr-defined]
    )


def factory_without_device(node: ast.AST) -> Optional[ast.Call]:
    """The ``torch.zeros(...)`` / ``torch.Tensor([...])`` call without ``device=`` that makes
    ``node``'s value, through chained calls like ``.float()``; None if the chain moves it
    (``.to()``, ``.cuda()``) or it is no such factory."""
    while isinstance(node, ast.Call):
        if _is_torch_call(node, _FACTORIES):
            return None if _has_keyword(node, "device") else node
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr in ("to", "cuda", "type"):
            return None
        node = func.value
    return None


# -- the checks --------------------------------------------------------------------------------


def _adds_tensor(value: ast.AST) -> bool:
    """Whether an added value may be a tensor: not a number, ``x.item()``, ``float(x)``."""
    if isinstance(value, ast.Constant):
        return False
    if isinstance(value, ast.Call):
        if _method_call(value, "item") or _method_call(value, "tolist"):
            return False
        if isinstance(value.func, ast.Name) and value.func.id in ("float", "int", "len"):
            return False
    return not (isinstance(value, ast.UnaryOp) and isinstance(value.operand, ast.Constant))


def _accumulations(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Per name, the first ``name += x`` / ``name = name + x`` (x maybe a tensor) inside a loop
    of ``body``."""
    found: dict[str, ast.AST] = {}
    for loop in walk_scope(body):
        if not isinstance(loop, _LOOPS):
            continue
        for node in walk_scope(loop.body):
            name = _accumulated(node)
            if name is not None and (
                name not in found or node.lineno < found[name].lineno  # type: ignore[attr-defined]
            ):
                found[name] = node
    return found


def _accumulated(node: ast.AST) -> Optional[str]:
    if (
        isinstance(node, ast.AugAssign)
        and isinstance(node.op, ast.Add)
        and isinstance(node.target, ast.Name)
        and _adds_tensor(node.value)
    ):
        return node.target.id
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
        if other is not None and _adds_tensor(other):
            return name
    return None


def cpu_accumulators(context: _Context) -> Iterator[Lint]:
    if not uses_accelerator(context.nodes):
        return
    for body in context.scopes():
        accumulations: Optional[dict[str, ast.AST]] = None
        for node in walk_scope(body):
            if not (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                continue
            call = factory_without_device(node.value)
            if call is None or not _is_torch_call(call, _SCALAR_ACCUMULATORS):
                continue
            if not all(_is_literal(a) for a in call.args):
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
                CPU_ACCUMULATOR,
                f"`{name}` is created on the CPU by `{source}` and a loop adds tensors to it "
                f"(line {added.lineno}); if they live on an accelerator the devices mix. "
                f"Create it with `device=`, or add `.item()` values.",
                *_span(call),
                fix_title=title,
                edits=edits,
            )


def _is_literal(node: ast.AST) -> bool:
    """Numbers, and tuples or lists of them (a small constant shape or value)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp):
        return _is_literal(node.operand)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_is_literal(e) for e in node.elts)
    return False


def loads_without_map_location(context: _Context) -> Iterator[Lint]:
    for node in context.nodes:
        if (
            _is_torch_call(node, {"load"})
            and isinstance(node, ast.Call)
            and len(node.args) < 2
            and not _has_keyword(node, "map_location")
        ):
            yield Lint(
                LOAD_WITHOUT_MAP_LOCATION,
                "`torch.load` without `map_location` restores tensors on the device they were "
                "saved from, which fails where that device is missing (a CPU machine, another "
                'GPU). Pass `map_location="cpu"` (or the target device).',
                *_span(node),
                fix_title='Add `map_location="cpu"`',
                edits=(add_keyword_edit(node, 'map_location="cpu"'),),
            )


def _zeroes_grads(node: ast.AST) -> bool:
    """``x.zero_grad(...)``, ``p.grad = None``, ``p.grad.zero_()``, ``p.grad.detach_()`` ..."""
    if _method_call(node, "zero_grad"):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        receiver = node.func.value
        if node.func.attr in ("zero_", "detach_", "requires_grad_") and (
            isinstance(receiver, ast.Attribute) and receiver.attr == "grad"
        ):
            return True
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in node.targets)
    return False


def _optimizer_of(step: ast.Call) -> Optional[str]:
    """The optimizer a ``.step()`` call steps: ``optimizer`` for ``optimizer.step()`` and
    ``scaler.step(optimizer)``; None for schedulers."""
    assert isinstance(step.func, ast.Attribute)
    receiver = ast.unparse(step.func.value)
    if "sched" in receiver.lower():
        return None
    if "scaler" in receiver.lower():  # scaler.step(optimizer)
        if step.args and isinstance(step.args[0], (ast.Name, ast.Attribute)):
            return ast.unparse(step.args[0])
        return None
    if step.args or step.keywords:
        return None  # closure-style steps zero inside the closure
    return receiver


def _training_calls(loop: ast.AST) -> tuple[bool, list[ast.Call], bool]:
    """Whether ``loop`` calls ``.backward()``, its ``.step()`` calls, whether it zeroes grads."""
    backward = zeroes = False
    steps = []
    for node in walk_scope(loop.body):  # type: ignore[attr-defined]
        if _method_call(node, "backward"):
            backward = True
        elif isinstance(node, ast.Call) and _method_call(node, "step") and _optimizer_of(node):
            steps.append(node)
        if _zeroes_grads(node):
            zeroes = True
    return backward, steps, zeroes


def missing_zero_grads(context: _Context) -> Iterator[Lint]:
    for loop in context.nodes:
        if not isinstance(loop, _LOOPS):
            continue
        backward, steps, zeroes = _training_calls(loop)
        if not backward or not steps or zeroes:
            continue
        inner = [n for n in walk_scope(loop.body) if isinstance(n, _LOOPS)]
        if any(_training_calls(n)[0] and _training_calls(n)[1] for n in inner):
            continue  # the innermost training loop is the one to report
        step = min(steps, key=lambda s: (s.lineno, s.col_offset))
        optimizer = _optimizer_of(step) or "optimizer"
        first = loop.body[0]
        edits: tuple[Edit, ...] = ()
        title = None
        if first.lineno > loop.lineno:
            indent = " " * first.col_offset
            edits = (Edit(first.lineno, 0, first.lineno, 0, f"{indent}{optimizer}.zero_grad()\n"),)
            title = f"Insert `{optimizer}.zero_grad()` at the start of the loop"
        yield Lint(
            MISSING_ZERO_GRAD,
            f"This loop calls `.backward()` and `{ast.unparse(step.func)}()` but never zeroes "
            "the gradients, so each step applies the sum of all gradients so far. Call "
            f"`{optimizer}.zero_grad()` in the loop.",
            *_span(step),
            fix_title=title,
            edits=edits,
        )


def _data_of(node: ast.AST) -> Optional[ast.Attribute]:
    """``<p>.data`` where ``p`` is not a ``.grad`` -> the attribute node, else None."""
    if isinstance(node, ast.Attribute) and node.attr == "data":
        receiver = node.value
        if isinstance(receiver, ast.Attribute) and receiver.attr == "grad":
            return None
        return node
    return None


def data_writes(context: _Context) -> Iterator[Lint]:
    for node in context.nodes:
        data: Optional[ast.Attribute] = None
        statement: Optional[ast.stmt] = None
        new_text: Optional[str] = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            data = _data_of(node.targets[0])
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
        if data is None or statement is None or context.in_no_grad(statement):
            continue
        title, edits = _no_grad_fix(context, statement, data, new_text)
        yield Lint(
            DATA_WRITE,
            f"`{ast.unparse(data)}` writes bypass autograd: the change is invisible to its "
            "version counter, so a backward through saved values may silently use wrong "
            "numbers. Write under `with torch.no_grad():` to the tensor itself.",
            *_span(statement),
            fix_title=title,
            edits=edits,
        )


def _no_grad_fix(
    context: _Context, statement: ast.stmt, data: ast.Attribute, new_text: Optional[str]
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
    line, col, _, end = _span(statement)
    return "Write under `torch.no_grad()` instead of through `.data`", (
        Edit(line, col, line, end, replacement),
    )


def _requires_grad_leaf(value: ast.AST) -> bool:
    """``torch.randn(..., requires_grad=True)`` or ``torch.randn(...).requires_grad_()``."""
    if not isinstance(value, ast.Call):
        return False
    if any(
        k.arg == "requires_grad" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in value.keywords
    ):
        return True
    call = _method_call(value, "requires_grad_")
    return call is not None and not (
        call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value is False
    )


def leaf_rebounds(context: _Context) -> Iterator[Lint]:
    for body in context.scopes():
        leaves: dict[str, int] = {}
        for node in sorted(
            (n for n in walk_scope(body) if isinstance(n, ast.Assign)),
            key=lambda n: (n.lineno, n.col_offset),
        ):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                continue
            name = node.targets[0].id
            if _requires_grad_leaf(node.value):
                leaves[name] = node.lineno
                continue
            if name not in leaves:
                continue
            uses_itself = isinstance(node.value, ast.BinOp) and any(
                isinstance(n, ast.Name) and n.id == name for n in ast.walk(node.value)
            )
            if not uses_itself or context.in_no_grad(node):
                if not uses_itself:
                    leaves.pop(name)  # rebound to something else: no longer the leaf
                continue
            yield Lint(
                LEAF_REBOUND,
                f"`{name}` (a leaf with requires_grad=True, line {leaves[name]}) is rebound to "
                "a new tensor computed from it: later `.grad` reads see None and the optimizer "
                f"updates the old tensor. Update in place: `with torch.no_grad(): {name} -= ...`.",
                *_span(node),
            )
