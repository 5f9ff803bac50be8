"""Why ``backward()`` raised "Trying to backward through the graph a second time": a tensor
carried from one iteration into the next still holds the earlier iteration's graph.

The classic case is a recurrent model trained by truncated backpropagation through time whose
hidden state is not detached between windows (``logits, hidden = model(x, hidden)``): the
second window's graph goes on from the first's, whose saved tensors the first ``backward()``
freed; a total summed across iterations and backpropagated at each (``total = total + loss;
total.backward()``) is another. PyTorch's message names neither the tensor nor the line. When a
``backward()`` raises it, the graph is walked from the backward's tensors to the nearest node
made before the previous backward's root (the earlier iteration's: the failed backward freed
the saved tensors of the nodes it ran, so a freed node says nothing); the variable of the
user's frame assigned from itself (``hidden = model(x, hidden)``) whose graph reaches that node
is the one carried over, and that statement is where it is carried. Nothing of this runs unless
the backward raised that error.
"""

from __future__ import annotations

import ast
import os
from typing import Any, Optional

import torch

from tensor_dap.agent import frames, naming
from tensor_dap.agent.graph_nodes import graph_node
from tensor_dap.agent.graph_walk import breadth_first
from tensor_dap.agent.provenance import NODE_PROV_KEY

#: what PyTorch's error says
SECOND_TIME = "backward through the graph a second time"
#: nodes walked, at most, to find the earlier iteration's
_WALK_LIMIT = 20000
_Tensor = torch.Tensor


def explain(
    targets: list[Any], caller: Any, made_by: int
) -> Optional[tuple[Optional[tuple[str, int]], str]]:
    """``(where to report, the text)`` for a backward() from ``caller`` of ``targets`` that
    raised the error (``made_by``: the sequence number of the previous backward's root); None
    when its graph does not go on from an earlier one."""
    earlier = earlier_node([graph_node(t) for t in targets if isinstance(t, _Tensor)], made_by)
    user = frames.user_frame(caller)
    if earlier is None or user is None:
        return None
    path = user.f_code.co_filename
    name, line = carried_name(user, earlier)
    text = naming.statement_text(path, line if line is not None else user.f_lineno)
    at = (path, line) if line is not None else None
    paired = name is not None and isinstance(frames.read_locals(user).get(name), (tuple, list))
    return at, message(name, earlier, (path, user.f_lineno), text, paired)


def earlier_node(roots: list[Any], made_by: int) -> Any:
    """The nearest node to ``roots`` (breadth first) made by the sequence number ``made_by``:
    where this graph goes on from an earlier iteration's."""
    return next((n for n in breadth_first(roots, _WALK_LIMIT) if _made_by(n, made_by)), None)


def _made_by(node: Any, sequence: int) -> bool:
    """Whether ``node`` was made by ``sequence`` (a parameter's ``AccumulateGrad`` is every
    iteration's: never)."""
    if type(node).__name__ == "AccumulateGrad":
        return False
    try:
        return int(node._sequence_nr()) <= sequence
    except Exception:
        return False


def carried_name(frame: Any, earlier: Any) -> tuple[Optional[str], Optional[int]]:
    """The variable of ``frame`` carried over, and the line carrying it: the last statement
    before the current line, in its function, that assigns a name from an expression reading
    it (``logits, hidden = model(x, hidden)``, ``total = total + loss``) and whose value's
    graph reaches ``earlier``; ``(None, None)`` when none does."""
    try:
        local = frames.read_locals(frame)
    except Exception:
        return None, None
    for line, name in reversed(_self_assignments(frame)):
        value = local.get(name)
        values = value if isinstance(value, (tuple, list)) else (value,)
        nodes = [graph_node(v) for v in values[:8] if isinstance(v, _Tensor)]
        if _reaches([n for n in nodes if n is not None], earlier):
            return name, line
    return None, None


def _self_assignments(frame: Any) -> list[tuple[int, str]]:
    """``(line, name)`` of each statement before ``frame``'s current line, in its function,
    that assigns ``name`` from an expression reading it, in line order."""
    tree = naming.module_tree(frame.f_code.co_filename)
    if tree is None:
        return []
    first, last = frame.f_code.co_firstlineno, frame.f_lineno
    found = []
    for statement in ast.walk(tree):
        if not (isinstance(statement, ast.Assign) and first <= statement.lineno < last):
            continue
        read = {n.id for n in ast.walk(statement.value) if isinstance(n, ast.Name)}
        for target in statement.targets:
            for one in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(one, ast.Name) and one.id in read:
                    found.append((statement.lineno, one.id))
    return sorted(found)


def _reaches(roots: list[Any], wanted: Any, limit: int = 4000) -> bool:
    return any(node is wanted for node in breadth_first(roots, limit))


def message(
    name: Optional[str],
    earlier: Any,
    backward_at: tuple[str, int],
    line_text: str,
    paired: bool = False,
) -> str:
    """The finding's text (``line_text``: the carrying statement, or the backward's;
    ``paired``: the variable holds several tensors, an LSTM's ``(h, c)``)."""
    prov = earlier.metadata.get(NODE_PROV_KEY) if hasattr(earlier, "metadata") else None
    made = f" (made at {prov.where()} by {prov.op})" if prov is not None else ""
    what = name or "a tensor carried from the previous iteration"
    backward = f"{os.path.basename(backward_at[0])}:{backward_at[1]}"
    if name is None:
        detach = "`.detach()` it"
    elif paired:
        detach = f"`{name} = tuple(h.detach() for h in {name})`"
    else:
        detach = f"`{name} = {name}.detach()`"
    return (
        f"`{line_text}`: {what} carries the previous iteration's autograd graph into this one: "
        f"its history goes back into the graph of an earlier backward(){made}, which freed it, "
        f"so backward() at {backward} fails with 'Trying to backward through the graph a "
        f"second time'. Detach it before it goes in again ({detach}), as truncated "
        "backpropagation through time does; retain_graph=True would instead backpropagate "
        "through every earlier iteration, longer each time."
    )
