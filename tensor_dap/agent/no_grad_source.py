"""Which line of the user's source turned gradient recording off: the ``with torch.no_grad():``
block or the ``@torch.no_grad()`` decorator around the code that is running.

``grad-lost`` names that line as where the history was cut: the op under it is only where the
cut showed, the block or decorator is what the user wrote and must change. Read statically
from the source (one parse per file) for the frame running the op and its callers; asked only
when an op under ``no_grad`` cuts a tensor's history, and cached per line.
"""

from __future__ import annotations

import ast
from types import FrameType
from typing import Optional

from tensor_dap.agent import frames, naming

#: calls that switch gradient recording off, as written in the source
_SWITCHES = ("no_grad", "inference_mode", "set_grad_enabled(False")

#: (path, line) -> the (path, line) of the block or decorator around it, or None
_CACHE: dict[tuple[str, int], Optional[tuple[str, int]]] = {}


def no_grad_site(frame: Optional[FrameType], depth: int = 8) -> Optional[tuple[str, int]]:
    """(path, line) of the ``with`` block or decorator that turned gradients off around
    ``frame``'s line or the line of one of its (user) callers, if one is written there."""
    while frame is not None and depth > 0:
        if frames.is_user_code(frame.f_code):
            key = (frame.f_code.co_filename, frame.f_lineno)
            if key not in _CACHE:
                _CACHE[key] = _site_around(*key)
            if _CACHE[key] is not None:
                return _CACHE[key]
        frame = frame.f_back
        depth -= 1
    return None


def _site_around(path: str, line: int) -> Optional[tuple[str, int]]:
    """The innermost ``with`` or decorated function around ``line`` that switches grad off."""
    tree = naming._tree(path)
    if tree is None:
        return None
    best: Optional[int] = None
    best_start = -1
    for node in ast.walk(tree):
        start = getattr(node, "lineno", None)
        end = getattr(node, "end_lineno", None)
        if start is None or end is None or not start <= line <= end or start < best_start:
            continue
        if isinstance(node, (ast.With, ast.AsyncWith)):
            items = (item.context_expr for item in node.items)
            switch = next((expr for expr in items if _is_switch(path, expr)), None)
            if switch is not None:
                best, best_start = switch.lineno, start
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            decorator = next((d for d in node.decorator_list if _is_switch(path, d)), None)
            if decorator is not None:
                best, best_start = decorator.lineno, start
    return (path, best) if best is not None else None


def _is_switch(path: str, node: ast.AST) -> bool:
    text = "".join((naming._segment(path, node) or "").split())
    return any(switch in text for switch in _SWITCHES)


def block_statements(path: str, line: int) -> list[int]:
    """The first lines of the statements the ``with`` block switching gradients off at
    ``line`` runs directly (a distillation's ``with torch.no_grad():`` around the teacher's
    forward, and by mistake the student's); none for a decorator."""
    tree = naming._tree(path)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, (ast.With, ast.AsyncWith)) and any(
            item.context_expr.lineno == line for item in node.items
        ):
            return [statement.lineno for statement in node.body]
    return []
