"""A gradient penalty turned into a Python number (part of ``grad-lost``).

``torch.autograd.grad(..., create_graph=True)`` builds a graph of the gradients so that a
``backward()`` can go through them: WGAN-GP's and R1's gradient penalties, double backprop,
MAML's inner steps. A penalty returned as ``((g.norm(2, dim=1) - 1) ** 2).mean().item()`` is a
Python float: ``d_loss = ... + 10 * gp`` adds a constant, the critic is never penalised, and
nothing says so — the loss even looks right.

Each ``autograd.grad(create_graph=True)`` call is remembered (the autograd nodes of its results,
by :func:`~tensor_dap.agent.graph_walk.node_key`, nothing kept alive) until the next
``optimizer.step()``. A value whose graph runs back to one of them handed to Python
(``.item()``, ``.tolist()``, ``float()``) marks the call; each ``backward()`` walks its graph
and marks the calls whose gradients it goes through. A call marked handed and never gone
through when a step comes means the penalty never got into a loss: the ``.item()`` line is
reported, paused at the step. A penalty logged with ``.item()`` and added to the loss as a
tensor, or backpropagated on its own (``gradient_penalty.backward()``), is gone through.
"""

from __future__ import annotations

import collections
import os
import sys
from dataclasses import dataclass
from typing import Any, Optional

import torch

from tensor_dap.agent import frames, naming
from tensor_dap.agent.graph_nodes import graph_node
from tensor_dap.agent.graph_walk import NodeKey, breadth_first, node_key
from tensor_dap.agent.rules import Report

#: rule_state key: the create_graph calls not judged yet: made since the last step and not
#: gone through by a backward() (a deque of :class:`_Made`)
_MADE = "grad-lost.create-graph-calls"
#: rule_state key: the lines that handed such values to Python (seen on sampled ops: kept)
_HANDED_LINES = "grad-lost.penalty-handed-lines"
#: the calls remembered at most between two steps (MAML's inner steps...)
_KEPT = 16
#: nodes walked at most, from a value handed out or a backward()'s roots
_WALK_LIMIT = 20000
_Tensor = torch.Tensor


@dataclass(eq=False)
class _Made:
    #: the autograd nodes of the call's results
    nodes: frozenset[NodeKey]
    #: the user's line calling autograd.grad
    at: tuple[str, int]
    #: where a value made of them was handed to Python, and how (``item``...); None: not yet
    handed: Optional[tuple[str, int, str]] = None


def made(args: Any, kwargs: Any, out: Any, caller: Any, state: Any) -> None:
    """``torch.autograd.grad`` returned ``out``: remembered when it built a graph of the
    gradients (``create_graph=True``, keyword or fifth argument)."""
    create = (kwargs or {}).get("create_graph", args[4] if len(args) > 4 else False)
    if not create or not isinstance(out, (tuple, list)):
        return
    nodes = frozenset(
        node_key(node)
        for item in out
        if isinstance(item, _Tensor) and (node := graph_node(item)) is not None
    )
    user = frames.user_frame(caller)
    if not nodes or user is None:
        return
    calls = state.rule_state.get(_MADE)
    if calls is None:
        calls = state.rule_state[_MADE] = collections.deque(maxlen=_KEPT)
    calls.append(_Made(nodes, (user.f_code.co_filename, user.f_lineno)))


def handed_out(tensor: Any, op_name: str, caller: Any, state: Any) -> None:
    """``tensor`` (with history) handed to Python by ``op_name``: the calls its graph runs back
    to are marked with this line."""
    calls = state.rule_state.get(_MADE)
    waiting = [call for call in calls if call.handed is None] if calls else []
    node = graph_node(tensor) if waiting else None
    if node is None:
        return
    found = _reached_by([node], waiting)
    user = frames.user_frame(caller) if found else None
    if user is None:
        return
    for call in found:
        call.handed = (user.f_code.co_filename, user.f_lineno, op_name)
    state.rule_state.setdefault(_HANDED_LINES, set()).add((user.f_code.co_filename, user.f_lineno))


def backward(roots: list[Any], state: Any) -> None:
    """A ``backward()`` from ``roots``: the calls whose gradients it goes through are done."""
    calls = state.rule_state.get(_MADE)
    nodes = [node for node in map(graph_node, roots) if node is not None] if calls else []
    if nodes:
        for call in _reached_by(nodes, list(calls)):
            calls.remove(call)


def at_step(optimizer: Any, caller: Any, state: Any) -> Optional[Report]:
    """Before ``optimizer.step()``: the report for a call whose gradients went to Python and
    into no ``backward()`` since it ran; every call is judged at the first step after it."""
    calls = state.rule_state.get(_MADE)
    if not calls:
        return None
    handed = [call for call in calls if call.handed is not None]
    calls.clear()
    user = frames.user_frame(caller)
    if not handed or user is None:
        return None
    handed_at = handed[0].handed
    assert handed_at is not None
    path, line, op_name = handed_at
    name = naming.object_name(user, optimizer) or "optimizer"
    step_at = (user.f_code.co_filename, user.f_lineno)
    message = _message(handed[0].at, op_name, name, step_at)
    return Report(tensors=[], message=message, operands=False, frame=user, at=(path, line))


def handed_here(state: Any) -> bool:
    """Whether values made of a create_graph call's gradients are handed to Python at the
    user line running now, while grad-lost is on (it reports that line at the step): a total
    freed there (``grad_norm = float(grad_norm.sqrt())`` after ``grad_norm += g.pow(2).sum()``)
    held a graph meant for the loss, which graph-kept then leaves to it."""
    lines = state.rule_state.get(_HANDED_LINES)
    if not lines or "grad-lost" not in state.enabled or "grad-lost" in state.failed:
        return False
    user = frames.user_frame(sys._getframe(1))
    return user is not None and (user.f_code.co_filename, user.f_lineno) in lines


def _reached_by(roots: list[Any], calls: list[_Made]) -> list[_Made]:
    """The calls among ``calls`` whose gradients the graph from ``roots`` runs back to."""
    wanted = {key: call for call in calls for key in call.nodes}
    found: list[_Made] = []
    with torch._C.DisableTorchFunction():
        for node in breadth_first(roots, _WALK_LIMIT):
            call = wanted.get(node_key(node))
            if call is not None and call not in found:
                found.append(call)
                if len(found) == len(calls):
                    break
    return found


def _message(made_at: tuple[str, int], op_name: str, name: str, step_at: tuple[str, int]) -> Any:
    call = "float()" if op_name == "__float__" else f".{op_name}()"

    def build(_described: list[Any], expression: str) -> str:
        return (
            f"`{expression}`: {call} turns a value made of the gradients of "
            f"torch.autograd.grad(..., create_graph=True) at {_where(made_at)} into a Python "
            f"number, and no backward() before {name}.step() at {_where(step_at)} goes "
            "through those gradients: a penalty made of them adds a constant to the loss and "
            f"trains nothing. Keep it a tensor in the loss (leave out {call}); call {call} "
            "only to log it."
        )

    return build


def _where(at: tuple[str, int]) -> str:
    return f"{os.path.basename(at[0])}:{at[1]}"
