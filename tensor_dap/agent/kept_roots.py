"""``losses.append(loss)``: the losses ``backward()`` ran from, kept by a list for logging.

Appending to a list is no torch op, so ``graph-kept`` looks at what it leaves behind: at each
``backward()`` it remembers the root (a one-element tensor with a ``grad_fn``, weakly, in a
:class:`~tensor_dap.agent.tensor_map.TensorMap`), and when a root is still alive
:data:`KEPT_AFTER` backward calls later, it looks for a list that holds it among the local
variables of the user's frames (and the attributes of their ``self``). A loop that rebinds
``loss`` each iteration lets the previous one go; a list keeps every iteration's loss and, with
it, every iteration's graph (their saved tensors were freed by ``backward()``, the nodes stay).
The finding is reported at the line that appends to that list (the source of the frame holding
it is searched for ``name.append(``); a root no list holds, or whose ``append`` cannot be
found, is let go unreported.
"""

from __future__ import annotations

import dis
import linecache
import re
from types import FrameType
from typing import Any, Optional

import torch

from tensor_dap.agent import frames
from tensor_dap.agent.graph_walk import footprint
from tensor_dap.agent.rules import Report
from tensor_dap.agent.tensor_map import TensorMap

#: a root alive this many backward() calls after its own is reported
KEPT_AFTER = 3
_ROOTS = "graph-kept.roots"
_Tensor = torch.Tensor
_FRAMES = 6
#: list items looked at, from the end (a root appended per iteration is near it)
_TAIL = 64


def check(args: Any, caller: FrameType, state: Any, backwards: int) -> Optional[Report]:
    """At the ``backwards``-th backward() call: remember its root, report a kept one."""
    roots: TensorMap[int] = state.rule_state.get(_ROOTS)
    if roots is None:
        roots = state.rule_state[_ROOTS] = TensorMap(capacity=16)
    found = None
    kept = None
    for root, number in roots.items():
        if backwards - number >= KEPT_AFTER:
            roots.pop(root)
            if found is None:
                found = _holder(root, caller)
                kept = root
    root = args[0] if args else None
    if isinstance(root, _Tensor) and root.grad_fn is not None and root.numel() == 1:
        roots.set(root, backwards)
    if found is None:
        return None
    user, name, held, line = found
    return Report(
        tensors=[kept],
        message=_message(kept, name, held),
        frame=user,
        at=(user.f_code.co_filename, line),
        operands=False,
    )


def _holder(root: Any, caller: FrameType) -> Optional[tuple[FrameType, str, list[Any], int]]:
    """The user frame, the list's name, the list and the line appending to it."""
    frame: Optional[FrameType] = frames.user_frame(caller)
    for _ in range(_FRAMES):
        if frame is None:
            return None
        if frames.is_user_code(frame.f_code):
            for name, held in _lists(frame):
                if any(item is root for item in held[-_TAIL:]):
                    line = _append_line(frame, name)
                    return (frame, name, held, line) if line else None
        frame = frame.f_back
    return None


def _lists(frame: FrameType) -> list[tuple[str, list[Any]]]:
    found: list[tuple[str, list[Any]]] = []
    try:
        local = dict(frame.f_locals)
    except Exception:
        return found
    for name, value in local.items():
        if isinstance(value, list):
            found.append((name, value))
        elif isinstance(value, dict):
            found.extend((f"{name}[{k!r}]", v) for k, v in value.items() if isinstance(v, list))
    owner = local.get("self")
    try:
        attrs = vars(owner) if owner is not None else {}
    except TypeError:
        attrs = {}
    found.extend((f"self.{k}", v) for k, v in attrs.items() if isinstance(v, list))
    return found


def _append_line(frame: FrameType, name: str) -> int:
    """The first line of the frame's function appending to ``name``; 0 when none is found."""
    code = frame.f_code
    pattern = re.compile(re.escape(name) + r"\s*(\.\s*(append|extend)\s*\(|\+=)")
    lines = sorted({line for _, line in dis.findlinestarts(code) if line is not None})
    for line in lines:
        if pattern.search(linecache.getline(code.co_filename, line)):
            return line
    return 0


def _message(root: Any, name: str, held: list[Any]) -> Any:
    count = sum(1 for item in held if isinstance(item, _Tensor) and item.grad_fn is not None)
    nodes = footprint(root.grad_fn).nodes

    def build(described: list[Any], expression: str) -> str:
        loss = described[0].name if described else "the loss"
        return (
            f"`{expression}`: {name} keeps {count} tensors that carry autograd history, one "
            f"per iteration, and with each its graph (about {nodes} autograd nodes each; "
            f"backward() freed their saved tensors, the nodes stay): memory grows every "
            f"iteration. Append a number or a detached tensor: `{name}.append({loss}.item())` "
            f"(or `{loss}.detach()`)."
        )

    return build
