"""A parameter the program re-made after its optimizer took it (part of ``grad-lost``).

GradNorm's task weights renormalized each step the short way, ``task_w = nn.Parameter((task_w /
task_w.sum() * 2).detach())``, or a raw weight re-made, ``w = w.detach().requires_grad_()``:
the name now holds a new leaf, the forward uses it, and the optimizer still holds the old one,
which gets no gradient from then on, while the new one is never stepped. No error; the weights
simply stop training. grad-lost's step check finds the old parameter without gradient; what it
names as the cause is this, when the old parameter is no longer held by any name the stepping
code sees (its variables, ``self``'s attributes, the modules in sight) and exactly one of those
names holds a leaf that requires grad, of the old one's shape, dtype and device, that the
optimizer does not step.
"""

from __future__ import annotations

import ast
from types import FrameType
from typing import Any, Optional

import torch

from tensor_dap.agent import frames, naming
from tensor_dap.agent.tensor_map import TensorMap

_Tensor = torch.Tensor


#: rule_state key: parameters found without gradient but still held (a head left out of the
#: loss, a pooler a masked-LM objective never uses): not looked for again at each step
_HELD = "grad-lost.lacking-but-held"


def find(
    optimizer: Any, lacking: list[Any], caller: FrameType, state: Any
) -> list[tuple[Any, str]]:
    """(parameter, the name now holding its replacement) for each of ``lacking`` (parameters of
    ``optimizer`` without gradient) that the program re-made: see the module's docstring."""
    known: Optional[TensorMap[bool]] = state.rule_state.get(_HELD)
    if known is not None:
        lacking = [p for p in lacking if known.get(p) is None]
    user = frames.user_frame(caller)
    if user is None or not lacking:
        return []
    try:
        names = _names_in_sight(user)
    except Exception:  # (a frame's locals or an object's __dict__ that cannot be read)
        return []
    stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
    held = {id(value) for value in names.values()}
    for module in naming.modules_in_sight(user):
        held.update(id(p) for p in module.parameters())
    leaves = [
        (name, value)
        for name, value in names.items()
        if value.requires_grad and value.is_leaf and id(value) not in stepped
    ]
    found = []
    for param in lacking:
        if id(param) in held:
            if known is None:
                known = state.rule_state[_HELD] = TensorMap()
            known.set(param, True)
            continue
        same = [name for name, value in leaves if _alike(value, param)]
        if len(same) == 1:
            found.append((param, same[0]))
    return found


def _names_in_sight(frame: FrameType) -> dict[str, Any]:
    """The tensors the frame names: its globals, its locals, ``self``'s attributes."""
    scope = {**frame.f_globals, **frames.read_locals(frame)}
    names = {name: value for name, value in scope.items() if isinstance(value, _Tensor)}
    owner = scope.get("self")
    if owner is not None and hasattr(owner, "__dict__"):
        for attribute, value in vars(owner).items():
            if isinstance(value, _Tensor):
                names[f"self.{attribute}"] = value
    return names


def _alike(one: Any, other: Any) -> bool:
    return bool(
        one.shape == other.shape and one.dtype == other.dtype and one.device == other.device
    )


def message(optimizer: str, remade: list[tuple[Any, str]], caller: FrameType) -> Any:
    """The finding's text: which names hold the replacements, where they are re-made, and the
    in-place update that keeps the optimizer's tensor."""
    user = frames.user_frame(caller)
    name = remade[0][1]
    line = _remade_at(user, name) if user is not None else None
    where = f" ({naming.place(user.f_code.co_filename, line)})" if user and line else ""
    others = f" (and {len(remade) - 1} more)" if len(remade) > 1 else ""

    def build(described: list[Any], expression: str) -> str:
        return (
            f"`{expression}`: {optimizer} steps a tensor the program no longer uses: {name} "
            f"names a new one{where}{others}, which the forward uses and {optimizer} does not "
            f"hold, so the tensor {optimizer} steps gets no gradient and the new {name} is "
            f"never updated by it. Update {name} in place instead, keeping the tensor "
            f"{optimizer} holds: `with torch.no_grad(): {name}.copy_(...)`."
        )

    return build


def _remade_at(frame: FrameType, name: str) -> Optional[int]:
    """The line of the assignment to ``name`` in the frame's function that re-makes
    it: one in the innermost loop around the frame's line, else the last one before that line."""
    path, line = frame.f_code.co_filename, frame.f_lineno
    tree = naming.module_tree(path)
    if tree is None:
        return None
    first = frame.f_code.co_firstlineno

    def around(node: ast.AST) -> bool:
        start = getattr(node, "lineno", 0)
        return bool(start <= line <= (getattr(node, "end_lineno", None) or start))

    assigns: list[ast.Assign] = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and node.lineno >= first
        and any(_target_text(t) == name for t in node.targets)
    ]
    loops = [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While)) and around(n)]
    chosen: list[ast.Assign] = []
    if loops:
        loop = max(loops, key=lambda node: node.lineno)
        end = loop.end_lineno or loop.lineno
        chosen = [node for node in assigns if loop.lineno <= node.lineno <= end]
    chosen = chosen or [node for node in assigns if node.lineno < line]
    if not chosen:
        return None
    return max(node.lineno for node in chosen)


def _target_text(target: ast.expr) -> str:
    try:
        return ast.unparse(target)
    except Exception:
        return ""
