"""Edits several quick fixes share: add a keyword argument to a call, create a tensor on the
device (``device=``) instead of the CPU."""

from __future__ import annotations

import ast

from .ast_helpers import has_keyword, span
from .model import Edit


def add_keyword_edit(call: ast.Call, text: str) -> Edit:
    """The edit adding ``text`` (``device=device``) as the last argument of ``call``."""
    args: list[ast.AST] = [*call.args, *call.keywords]
    if args:
        _, _, line, col = max((span(a) for a in args), key=lambda s: (s[2], s[3]))
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
        if not floats and not has_keyword(call, "dtype"):
            extra = f"dtype=torch.float32, {extra}"
    edits.append(add_keyword_edit(call, extra))
    return f"Create it on the device: add `{extra}`", tuple(edits)
