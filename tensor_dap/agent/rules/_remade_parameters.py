"""A parameter the program re-made after its optimizer took it (part of ``grad-lost``).

GradNorm's task weights renormalized each step the short way, ``task_w = nn.Parameter((task_w /
task_w.sum() * 2).detach())``, or a raw weight re-made, ``w = w.detach().requires_grad_()``:
the name now holds a new leaf, the forward uses it, and the optimizer still holds the old one,
which gets no gradient from then on, while the new one is never stepped. No error; the weights
simply stop training. grad-lost's step check finds the old parameter without gradient; what it
names as the cause is this, when the old parameter is no longer held by any name the stepping
code sees (its variables, ``self``'s attributes, the modules in sight) and exactly one of those
names holds a leaf of the old one's shape, dtype and device that the optimizer does not step,
that a graph-building op used after the old one's last use, and that the loop around the step
assigns. (A head left out of the loss beside another optimizer's task weights of its shape is
none of this: nothing re-assigns them in the loop.)
"""

from __future__ import annotations

import ast
from types import FrameType
from typing import Any, Optional

import torch

from tensor_dap.agent import frames, naming
from tensor_dap.agent.tensor_map import TensorMap

_Tensor = torch.Tensor
#: what a re-made leaf is: ``nn.Parameter(...)``, or a plain tensor made a leaf again
_LEAF_TYPES = frozenset({torch.nn.Parameter, _Tensor})


#: rule_state key: parameters found without gradient but still held (a head left out of the
#: loss, a pooler a masked-LM objective never uses): not looked for again at each step
_HELD = "grad-lost.lacking-but-held"


def find(
    optimizer: Any,
    lacking: list[tuple[Any, Optional[int]]],
    used: Any,
    caller: FrameType,
    state: Any,
) -> list[tuple[Any, str, int]]:
    """(parameter, the name now holding its replacement, the line re-making it) for each of
    ``lacking`` (parameters of ``optimizer`` without gradient, with when their last use was,
    if seen) that the program re-made: a leaf of its kind, not stepped by ``optimizer``, used
    in a graph after it (``used``: grad-lost's uses this step, a TensorMap of (when, where,
    built a graph)), held by exactly one name in sight, which the frame's function assigns."""
    fresh = {
        id(tensor): when
        for tensor, (when, _, builds) in (used.items() if used else ())
        if builds and type(tensor) in _LEAF_TYPES
    }
    known: Optional[TensorMap[bool]] = state.rule_state.get(_HELD)
    if known is not None:
        lacking = [(p, when) for p, when in lacking if known.get(p) is None]
    user = frames.user_frame(caller)
    if not fresh or user is None or not lacking:  # (the usual case: no new leaf used)
        return []
    try:
        names = _names_in_sight(user)
    except Exception:  # (a frame's locals or an object's __dict__ that cannot be read)
        return []
    stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
    leaves = [
        (name, value, fresh[id(value)])
        for name, value in names.items()
        if id(value) in fresh and id(value) not in stepped and value.is_leaf
    ]
    if not leaves:
        return []
    held = {id(value) for value in names.values()}
    for module in naming.modules_in_sight(user):
        held.update(id(p) for p in module.parameters())
    found = []
    for param, last_use in lacking:
        if id(param) in held:
            if known is None:
                known = state.rule_state[_HELD] = TensorMap()
            known.set(param, True)
            continue
        same = [
            name
            for name, value, when in leaves
            if _alike(value, param) and (last_use is None or when > last_use)
        ]
        line = _remade_at(user, same[0]) if len(same) == 1 else None
        if line is not None:
            found.append((param, same[0], line))
    return found


def _names_in_sight(frame: FrameType) -> dict[str, Any]:
    """The tensors the frame names (:func:`naming.names_in_sight`)."""
    return {n: v for n, v in naming.names_in_sight(frame).items() if isinstance(v, _Tensor)}


def _alike(one: Any, other: Any) -> bool:
    return bool(
        one.shape == other.shape and one.dtype == other.dtype and one.device == other.device
    )


def message(optimizer: str, remade: list[tuple[Any, str, int]], caller: FrameType) -> Any:
    """The finding's text: which name holds the replacement, where it is re-made, and the
    in-place update that keeps the optimizer's tensor."""
    user = frames.user_frame(caller)
    _, name, line = remade[0]
    where = f" ({naming.place(user.f_code.co_filename, line)})" if user is not None else ""

    def build(described: list[Any], expression: str) -> str:
        others = [f"{d.name} {d.shape_text}" for d in described[1:]]
        also = f" (and {', '.join(others)}, re-made the same way)" if others else ""
        return (
            f"`{expression}`: {optimizer} steps a tensor the program no longer uses: {name} "
            f"names a new one{where}{also}, which the forward uses and {optimizer} does not "
            f"hold, so the tensor {optimizer} steps gets no gradient and the new {name} is "
            f"never updated by it. Update {name} in place instead, keeping the tensor "
            f"{optimizer} holds: `with torch.no_grad(): {name}.copy_(...)`."
        )

    return build


def _remade_at(frame: FrameType, name: str) -> Optional[int]:
    """The line of an assignment to ``name`` in the innermost loop around the frame's line, in
    the frame's function: where the program re-makes it at every iteration (None: nowhere)."""
    tree = naming.module_tree(frame.f_code.co_filename)
    loop = naming.innermost_loop(tree, frame.f_lineno) if tree is not None else None
    if loop is None:  # (a loop around the line is inside the frame's function, or is it)
        return None
    assigns = [
        node.lineno
        for node in ast.walk(loop)
        if isinstance(node, ast.Assign) and any(_target_text(t) == name for t in node.targets)
    ]
    return max(assigns) if assigns else None


def _target_text(target: ast.expr) -> str:
    try:
        return ast.unparse(target)
    except Exception:
        return ""
