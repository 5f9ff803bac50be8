"""The parsed source the checks share: the tree with parent links, its lines as UTF-8 (the unit
of ``ast`` columns) and the questions several checks ask (inside ``no_grad``? which scopes?)."""

from __future__ import annotations

import ast
from typing import Iterator, Optional, Union

from .ast_helpers import NO_GRAD, SCOPES, called_name, device_expression, span

MAX_SOURCE = 2_000_000
"""Sources longer than this (characters) are not linted."""


def parse(source: str) -> Optional[ast.Module]:
    """The module's tree, or None when it does not parse (or is too big to lint)."""
    if len(source) > MAX_SOURCE:
        return None
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def walk_scope(nodes: Union[ast.AST, list[ast.stmt]]) -> Iterator[ast.AST]:
    """Like ``ast.walk`` but not into functions, classes and lambdas (which are yielded, not
    entered, when they are among ``nodes`` themselves)."""
    todo: list[ast.AST] = list(nodes) if isinstance(nodes, list) else [nodes]
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def target_key(node: ast.AST) -> Optional[str]:
    """``x`` for a name, ``obj.attr`` for an attribute of a name; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


class LintContext:
    """The tree with parent links, and what several checks ask of it."""

    def __init__(self, tree: ast.Module, source: str) -> None:
        self.tree = tree
        self.source = source
        self.lines = source.splitlines()
        self.nodes = list(ast.walk(tree))
        self._parents: Optional[dict[ast.AST, ast.AST]] = None
        self._assignments: Optional[dict[str, list[ast.Assign]]] = None
        self._no_grad_callees: Optional[set[str]] = None
        self.device = device_expression(self.nodes)

    @property
    def assignments(self) -> dict[str, list[ast.Assign]]:
        """The ``=`` statements per target (``name`` or ``obj.attr``, see :func:`target_key`),
        in source order: what lets checks ask what a name holds without walking the tree."""
        if self._assignments is None:
            self._assignments = {}
            for node in self.nodes:
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        key = target_key(target)
                        if key is not None:
                            self._assignments.setdefault(key, []).append(node)
            for found in self._assignments.values():
                found.sort(key=lambda a: (a.lineno, a.col_offset))
        return self._assignments

    @property
    def no_grad_callees(self) -> set[str]:
        """Names of the functions the file calls inside ``with torch.no_grad():`` (an
        evaluation helper is often called that way: its own body needs no ``no_grad``)."""
        if self._no_grad_callees is None:
            self._no_grad_callees = set()
            for node in self.nodes:
                if isinstance(node, ast.Call):
                    name = called_name(node)
                    if name is not None and self.in_no_grad(node):
                        self._no_grad_callees.add(name)
        return self._no_grad_callees

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
        line, col, end_line, end = span(node)
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
            if isinstance(parent, SCOPES):
                return False
            if isinstance(parent, (ast.With, ast.AsyncWith)) and any(
                called_name(item.context_expr) in NO_GRAD for item in parent.items
            ):
                return True
        return False

    def scopes(self) -> Iterator[list[ast.stmt]]:
        """The statement lists of the module and of every function."""
        yield self.tree.body
        for node in self.nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield node.body
