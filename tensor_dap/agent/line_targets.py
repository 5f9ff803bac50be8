"""What each statement of a file assigns, read once from its source, for the trace recorder.

The recorder describes the value a line leaves in its names, not the last tensor an op made on
it; for that it needs, per statement: the names it binds (``x``, each of ``x, y = batch``,
``self.w``, the receiver of ``y.add_(1)``), the span of the expression whose value is bound (an
op called at exactly that span made the value itself), the statements around it that run in a
straight line (they may bind names without running any op), and where else each name is bound
(a value read later is the line's only if nothing bound the name in between). All of it is
static and cached per file, so the per-op path pays dictionary lookups only.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Optional

from tensor_dap.agent import naming

Span = tuple[int, int, int, int]
"""(line, col, end line, end col) of an expression, as ``co_positions`` gives an instruction's."""

NAME, ATTRIBUTE, VALUE = "name", "attribute", "value"
"""Target kinds: a variable; an attribute of one (``self.w``), read from instance dicts only;
a value no variable holds (``return ...``, ``d[k] = ...``), known only from the op that made it."""

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_COMPOUND = (
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.If,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
)
_NESTED_LOOPS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)


@dataclass(frozen=True)
class Target:
    """One name a statement binds: its text (``x``, ``self.w``), kind, and the path of names
    to read (``("self", "w")``); ``unpacked`` when it is one of several (``x, y = ...``)."""

    text: str
    kind: str
    parts: tuple[str, ...] = ()
    unpacked: bool = False


@dataclass(eq=False)
class Statement:
    """A simple statement, or the header of a compound one (``for x, y in loader:``)."""

    line: int
    end_col: Optional[int]
    """Byte column where the statement ends, when it ends on its first line (for the hint)."""
    targets: tuple[Target, ...]
    value: Optional[Span]
    """The expression whose value is bound or returned; None when there is none."""
    loops: tuple[tuple[int, int], ...]
    """Line ranges of the loops the statement is in (a loop header: its own loop too)."""
    inner_loop: bool
    """A comprehension or lambda runs inside it: its instructions repeat within one run."""
    simple: bool
    scope: int = 0
    """The line of the function or class whose code runs it (0: the module's)."""
    body: list[Statement] = field(default_factory=list, repr=False)
    """The statements of the block it is in, in order (itself included)."""
    index: int = 0

    def in_loop_with(self, other: Statement) -> bool:
        """Whether both statements are in one loop (running ``other`` after this one again)."""
        return bool(set(self.loops) & set(other.loops))


@dataclass
class FileTargets:
    statements: dict[int, Statement]
    """Every line of a simple statement or of a compound statement's header -> the statement."""
    bound_at: dict[tuple[int, str], list[int]]
    """(scope, target text) -> the lines of the statements of that scope that bind it."""


_FILES: dict[str, Optional[FileTargets]] = {}


def file_targets(path: str) -> Optional[FileTargets]:
    """The statements of the file at ``path`` (cached; None when its source is not readable)."""
    if path not in _FILES:
        tree = naming._tree(path)
        _FILES[path] = None if tree is None else _Builder(path).build(tree)
    return _FILES[path]


def statement_at(path: str, line: int) -> Optional[Statement]:
    found = file_targets(path)
    return None if found is None else found.statements.get(line)


def rebound_between(path: str, target: Target, statement: Statement, before: int) -> bool:
    """Whether a statement of its scope other than ``statement`` may bind ``target`` on the way
    from ``statement`` to line ``before`` (forward, or around a loop when ``before`` is not
    after it)."""
    found = file_targets(path)
    if found is None:
        return True
    after = statement.line
    for line in found.bound_at.get((statement.scope, target.text), ()):
        if line == after:
            continue
        if after < before and after < line < before:
            return True
        if before <= after and (line > after or line < before):
            return True
    return False


def straight_before(statement: Statement, since: Optional[Statement]) -> list[Statement]:
    """The simple statements that ran just before ``statement`` in its block, in a straight
    line: back to a compound statement, the block's start or ``since`` (not included)."""
    found = []
    for other in reversed(statement.body[: statement.index]):
        if other is since or not other.simple:
            break
        found.append(other)
    return found[::-1]


def straight_after(statement: Statement, until: Optional[Statement]) -> list[Statement]:
    """The simple statements that ran after ``statement`` and before ``until``, when both are
    in one block with ``until`` later in it (nothing else is sure to have run); ``until``
    None: those up to the block's end (a loop's body that came round)."""
    if until is None:
        end = len(statement.body)
    elif until.body is not statement.body or until.index <= statement.index:
        return []
    else:
        end = until.index
    found: list[Statement] = []
    for other in statement.body[statement.index + 1 : end]:
        if not other.simple:
            return [] if until is not None else found
        found.append(other)
    return found


class _Builder:
    def __init__(self, path: str) -> None:
        self.path = path
        self.statements: dict[int, Statement] = {}
        self.bound_at: dict[tuple[int, str], list[int]] = {}

    def build(self, tree: ast.Module) -> FileTargets:
        self._block(tree.body, (), 0)
        return FileTargets(self.statements, self.bound_at)

    def _block(self, nodes: list[ast.stmt], loops: tuple[tuple[int, int], ...], scope: int) -> None:
        body: list[Statement] = []
        for node in nodes:
            statement = self._statement(node, loops)
            statement.body, statement.index, statement.scope = body, len(body), scope
            body.append(statement)
            for target in statement.targets:
                if target.kind != VALUE:
                    key = (scope, target.text)
                    self.bound_at.setdefault(key, []).append(statement.line)
            header_end = node.end_lineno or node.lineno
            inner = [
                child
                for name in ("body", "orelse", "finalbody")
                for child in getattr(node, name, None) or []
                if isinstance(child, ast.stmt)
            ] + [case.pattern for case in _cases(node)]
            if inner:
                header_end = min(child.lineno for child in inner) - 1
            for line in range(node.lineno, max(node.lineno, header_end) + 1):
                self.statements[line] = statement
            own, inner_scope = loops, scope
            if isinstance(node, _LOOPS):
                own = (*loops, (node.lineno, node.end_lineno or node.lineno))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own, inner_scope = (), node.lineno  # another code object, with its own names
            for name in ("body", "orelse", "finalbody"):
                block = getattr(node, name, None)
                if block and isinstance(block[0], ast.stmt):
                    self._block(block, own, inner_scope)
            for handler in [*(getattr(node, "handlers", None) or ()), *_cases(node)]:
                self._block(handler.body, own, inner_scope)

    def _statement(self, node: ast.stmt, loops: tuple[tuple[int, int], ...]) -> Statement:
        end_col = node.end_col_offset if node.end_lineno == node.lineno else None
        targets: list[Target] = []
        value: Optional[ast.AST] = None
        if isinstance(node, ast.Assign):
            for target in node.targets:
                targets.extend(self._targets(target, False))
            value = node.value
        elif isinstance(node, ast.AnnAssign):
            targets.extend(self._targets(node.target, False))
            value = node.value
        elif isinstance(node, ast.AugAssign):
            targets.extend(self._targets(node.target, False))
            value = node  # ``x += 1``: the in-place op's span is the statement's
        elif isinstance(node, ast.Return):
            targets.append(Target("return", VALUE))
            value = node.value
        elif isinstance(node, ast.Expr):
            value = node.value
            call = node.value
            receiver = (
                call.func.value
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                else None
            )
            found = self._targets(receiver, False) if receiver is not None else []
            if len(found) == 1 and found[0].kind != VALUE:  # ``y.add_(1)``: y, after it
                targets.extend(found)
            else:  # ``torch.zeros(3)`` alone: its value, when an op made it
                targets.append(Target(naming._segment(self.path, call) or "", VALUE))
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            targets.extend(self._targets(node.target, False))
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    targets.extend(self._targets(item.optional_vars, False))
        if len(targets) > 1:
            targets = [Target(t.text, t.kind, t.parts, True) for t in targets]
        inner_loop = any(isinstance(n, _NESTED_LOOPS) for n in ast.walk(node)) and not isinstance(
            node, _COMPOUND
        )
        own_loops = loops
        if isinstance(node, _LOOPS):
            own_loops = (*loops, (node.lineno, node.end_lineno or node.lineno))
        return Statement(
            line=node.lineno,
            end_col=end_col,
            targets=tuple(targets),
            value=_span(value) if value is not None else None,
            loops=own_loops,
            inner_loop=inner_loop,
            simple=not isinstance(node, _COMPOUND)
            and isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Pass)),
        )

    def _targets(self, node: ast.AST, unpacked: bool) -> list[Target]:
        if isinstance(node, ast.Name):
            return [Target(node.id, NAME, (node.id,), unpacked)]
        if isinstance(node, ast.Starred):
            return self._targets(node.value, unpacked)
        if isinstance(node, (ast.Tuple, ast.List)):
            return [t for elt in node.elts for t in self._targets(elt, True)]
        parts = _attribute_path(node)
        text = naming._segment(self.path, node) or ""
        if parts is not None:
            return [Target(text, ATTRIBUTE, parts, unpacked)]
        return [Target(text, VALUE, (), unpacked)]


def _cases(node: ast.stmt) -> list[Any]:
    """The cases of a ``match`` statement (Python 3.10+), else none."""
    return list(getattr(node, "cases", None) or ())


def _attribute_path(node: ast.AST) -> Optional[tuple[str, ...]]:
    """``self.net.fc`` -> ``("self", "net", "fc")``; None for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not parts or not isinstance(node, ast.Name):
        return None
    return (node.id, *reversed(parts))


def _span(node: ast.AST) -> Optional[Span]:
    try:
        return (
            node.lineno,  # type: ignore[attr-defined]
            node.col_offset,  # type: ignore[attr-defined]
            node.end_lineno,  # type: ignore[attr-defined]
            node.end_col_offset,  # type: ignore[attr-defined]
        )
    except AttributeError:
        return None
