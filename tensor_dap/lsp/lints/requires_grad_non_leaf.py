"""``requires-grad-non-leaf``: ``w = torch.randn(..., requires_grad=True).to(device)`` (or
``.cuda()``, ``.double()``): ``w`` holds the copy, a non-leaf, so ``w.grad`` stays None after
``backward()`` and an optimizer given ``w`` never updates it. The fix makes the tensor where it
belongs: ``device=`` (or ``dtype=``) in the factory."""

from __future__ import annotations

import ast
from typing import Iterator, Optional

from .ast_helpers import called_name, has_keyword, span
from .context import LintContext, target_key
from .fixes import add_keyword_edit
from .model import Edit, Lint, LintSpec

CODE = "requires-grad-non-leaf"

_OPTIMIZERS = {
    "SGD",
    "Adam",
    "AdamW",
    "RMSprop",
    "Adagrad",
    "Adadelta",
    "Adamax",
    "NAdam",
    "RAdam",
    "ASGD",
    "Rprop",
    "LBFGS",
    "SparseAdam",
}
_DTYPES = {"float": "torch.float32", "double": "torch.float64", "half": "torch.float16"}
_MOVES = {"to", "cuda", "type", "bfloat16", *_DTYPES}


def _made_with_grad(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and any(
        k.arg == "requires_grad" and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in node.keywords
    )


def _fix(move: ast.Call, made: ast.Call) -> Optional[tuple[str, str]]:
    """The keyword the factory takes instead of the move (``device=device``), if simple."""
    assert isinstance(move.func, ast.Attribute)
    name, args = move.func.attr, move.args
    if move.keywords:
        return None
    if name == "cuda" and not args:
        return "device", 'device="cuda"'
    if name in _DTYPES and not args:
        return "dtype", f"dtype={_DTYPES[name]}"
    if name == "to" and len(args) == 1:
        arg = args[0]
        dtype = (
            isinstance(arg, ast.Attribute)
            and isinstance(arg.value, ast.Name)
            and arg.value.id == "torch"
            and arg.attr != "device"
        )
        if dtype or (isinstance(arg, ast.Name) and "dtype" in arg.id):
            return "dtype", f"dtype={ast.unparse(arg)}"
        return "device", f"device={ast.unparse(arg)}"
    return None


def _grad_wanted(context: LintContext, key: str) -> bool:
    """Whether the file reads ``<key>.grad`` or gives ``key`` to an optimizer: only then does
    a non-leaf's missing ``.grad`` matter."""
    for node in context.nodes:
        if isinstance(node, ast.Attribute) and node.attr == "grad":
            if target_key(node.value) == key:
                return True
        elif (
            isinstance(node, ast.Call)
            and called_name(node) in _OPTIMIZERS
            and any(target_key(n) == key for a in node.args for n in ast.walk(a))
        ):
            return True
    return False


def check(context: LintContext) -> Iterator[Lint]:
    for node in context.nodes:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        move = node.value
        func = move.func
        if not (isinstance(func, ast.Attribute) and func.attr in _MOVES):
            continue
        made = func.value
        if not (_made_with_grad(made) and isinstance(made, ast.Call)):
            continue
        target = ast.unparse(node.targets[0])
        key = target_key(node.targets[0])
        wanted = key is not None and _grad_wanted(context, key)
        title: Optional[str] = None
        edits: tuple[Edit, ...] = ()
        keyword = _fix(move, made)
        if keyword is not None and not has_keyword(made, keyword[0]):
            _, _, line, end = span(made)
            _, _, move_line, move_end = span(move)
            edits = (
                add_keyword_edit(made, keyword[1]),
                Edit(line, end, move_line, move_end, ""),
            )
            title = f"Create it there: `{keyword[1]}` in `{called_name(made)}(...)`"
        yield Lint(
            CODE,
            f"`{target}` holds the result of `.{func.attr}(...)`, a copy of the tensor made "
            f"with `requires_grad=True`: a non-leaf, so `{target}.grad` stays None after "
            "`backward()` and an optimizer given it never updates it"
            + ("" if wanted else " (it matters once you read its `.grad` or optimize it)")
            + ". Create the tensor on its device and dtype: pass `device=` / `dtype=` to the "
            "factory.",
            *span(move),
            fix_title=title,
            edits=edits,
            severity="warning" if wanted else "hint",
        )


SPEC = LintSpec(
    CODE,
    "warning",
    "`torch.randn(..., requires_grad=True).to(device)`: the name holds a non-leaf",
    check,
    needs=("requires_grad",),
)
