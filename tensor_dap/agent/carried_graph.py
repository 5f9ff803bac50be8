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
    when its graph does not go on from an earlier one. Where it goes on from it: a variable of
    the loop assigned from itself (``logits, hidden = model(x, hidden)``); else the statement
    that made the earlier graph's tensor, when it assigns from itself (``self.memory =
    self.memory + h.mean(0)`` in a module); else a variable whose tensor the earlier backward
    went through already (a GAN's ``fake``, backpropagated by the discriminator's loss)."""
    earlier = earlier_node([graph_node(t) for t in targets if isinstance(t, _Tensor)], made_by)
    user = frames.user_frame(caller)
    if earlier is None or user is None:
        return None
    path, backward_at = user.f_code.co_filename, (user.f_code.co_filename, user.f_lineno)
    prov = earlier.metadata.get(NODE_PROV_KEY) if hasattr(earlier, "metadata") else None
    name, line = carried_name(user, earlier)
    if name is not None and line is not None:
        paired = isinstance(frames.read_locals(user).get(name), (tuple, list))
        text = naming.statement_text(path, line)
        return (path, line), carried_message(name, prov, backward_at, text, paired)
    if prov is not None:
        text = naming.statement_text(prov.path, prov.line)
        assigned = _assigned_from_itself(naming.parsed_statement(text))
        if assigned:
            return (prov.path, prov.line), carried_message(assigned[0], None, backward_at, text)
    reused = _holding(user, earlier)
    return None, reused_message(reused, prov, naming.statement_text(path, user.f_lineno))


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
    found = [
        (statement.lineno, name)
        for statement in ast.walk(tree)
        if isinstance(statement, ast.Assign) and first <= statement.lineno < last
        for name in _assigned_from_itself(statement)
    ]
    return sorted(found)


def _assigned_from_itself(statement: Optional[ast.AST]) -> list[str]:
    """The targets an assignment reads in its value: ``hidden`` of ``out, hidden = model(x,
    hidden)``, ``self.memory`` of ``self.memory = torch.cat([self.memory, h])[-L:]``."""
    if not isinstance(statement, ast.Assign):
        return []
    read = {
        ast.unparse(n)
        for n in ast.walk(statement.value)
        if isinstance(n, (ast.Name, ast.Attribute))
    }
    return [
        ast.unparse(one)
        for target in statement.targets
        for one in (target.elts if isinstance(target, ast.Tuple) else [target])
        if isinstance(one, (ast.Name, ast.Attribute)) and ast.unparse(one) in read
    ]


def _holding(frame: Any, earlier: Any) -> Optional[str]:
    """The local variable of ``frame`` whose tensor's own node is ``earlier``."""
    try:
        local = frames.read_locals(frame)
    except Exception:
        return None
    for name, value in local.items():
        if isinstance(value, _Tensor) and graph_node(value) is earlier:
            return name
    return None


def _reaches(roots: list[Any], wanted: Any, limit: int = 4000) -> bool:
    return any(node is wanted for node in breadth_first(roots, limit))


def carried_message(
    name: str,
    prov: Any,
    backward_at: tuple[str, int],
    line_text: str,
    paired: bool = False,
) -> str:
    """A tensor carried from one iteration into the next with its graph (``line_text``: the
    statement carrying it; ``paired``: it holds several tensors, an LSTM's ``(h, c)``)."""
    made = f" (made at {prov.where()} by {prov.op})" if prov is not None else ""
    if paired:
        detach = f"`{name} = tuple(h.detach() for h in {name})`"
    else:
        detach = f"`{name} = {name}.detach()`"
    return (
        f"`{line_text}`: {name} carries the autograd graph of an earlier iteration into this "
        f"one: its history goes back into a graph an earlier backward() went through and "
        f"freed{made}, so backward() at {_where(backward_at)} fails with 'Trying to backward "
        f"through the graph a second time'. Detach it before it goes in again ({detach}), as "
        "truncated backpropagation through time does; retain_graph=True would instead "
        "backpropagate through every earlier iteration, longer each time."
    )


def reused_message(name: Optional[str], prov: Any, line_text: str) -> str:
    """A graph an earlier backward() of the same iteration went through (a GAN's ``fake``
    in the discriminator's loss, then in the generator's)."""
    made = f" (made at {prov.where()} by {prov.op})" if prov is not None else ""
    what = f"{name}{made}" if name else f"a tensor{made}"
    detach = f"`{name}.detach()`" if name else "its `.detach()`"
    return (
        f"`{line_text}`: this backward() goes through {what}, whose graph an earlier backward() "
        "already went through and freed: 'Trying to backward through the graph a second time'. "
        f"Where the earlier loss uses it, use {detach} (a discriminator's step on a "
        "generator's output), or pass retain_graph=True to that backward() to keep the graph "
        "for this one."
    )


def keeps_graph(args: tuple[Any, ...], kwargs: Any) -> bool:
    """Whether a ``torch.autograd.grad(outputs, inputs, grad_outputs, retain_graph,
    create_graph, ...)`` call keeps the graph it goes through (either flag true)."""
    named = kwargs or {}
    retain = args[3] if len(args) > 3 else named.get("retain_graph")
    create = args[4] if len(args) > 4 else named.get("create_graph", False)
    return bool(retain) or bool(create)


def freed_by_grad(grad_at: tuple[str, int], caller: Any) -> str:
    """The graph the failed ``backward()`` from ``caller`` goes through was freed by the
    ``torch.autograd.grad`` at ``grad_at``, called without ``create_graph`` or
    ``retain_graph`` (a PDE residual's second derivative, a gradient penalty, a gradient
    norm logged before the backward())."""
    user = frames.user_frame(caller)
    backward = f" at {_where((user.f_code.co_filename, user.f_lineno))}" if user else ""
    text = naming.statement_text(*grad_at)
    return (
        f"`{text}`: torch.autograd.grad here went through the graph that backward(){backward} "
        "goes through again, and freed it: it ran without create_graph=True or "
        "retain_graph=True, so that backward() fails with 'Trying to backward through the "
        "graph a second time'. If the loss is made of what it returns (a derivative in a PDE "
        "residual, a gradient penalty), pass create_graph=True there: the gradients it returns "
        "then have history of their own, and the graph is kept; if the program only reads "
        "them, pass retain_graph=True."
    )


def _where(at: tuple[str, int]) -> str:
    return f"{os.path.basename(at[0])}:{at[1]}"
