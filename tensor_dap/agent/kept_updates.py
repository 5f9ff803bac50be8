"""``graph-kept``'s in-place form: a tensor updated in place at every optimizer step from
tensors that carry autograd history, outside ``torch.no_grad()``.

An exponential moving average of the weights written by hand,

    for p_ema, p in zip(ema.parameters(), model.parameters()):
        p_ema.mul_(decay).add_(p, alpha=1 - decay)

(or ``p_ema.lerp_(p, 1 - decay)``, ``torch._foreach_lerp_(ema_params, params, 1 - decay)``,
``p_ema.copy_(decay * p_ema + (1 - decay) * p)``, a hand-written SWA average ``p_swa += (p -
p_swa) / (n + 1)``, a custom BatchNorm's running mean) without ``torch.no_grad()`` gives each
EMA tensor a ``grad_fn``: the update records the parameter's use, and the next step's update
chains onto that node. Nothing raises (the EMA tensors do not require grad, so PyTorch allows
the in-place update); every step adds a few nodes to every EMA tensor's chain, for as long as
the program trains, and an evaluation with the EMA model builds graphs through all of it.
``timm``'s ``ModelEmaV2`` and every careful implementation run the update under
``torch.no_grad()``.

Seen here: an in-place add, subtract, interpolation or copy (:data:`UPDATES`, their
``_foreach`` forms) of user code whose target now has a ``grad_fn``. A target is remembered
(weakly, with its node) when the update gave it its first history (the node's first input is
empty: a residual ``out += identity`` of an activation is left after one look at its node);
when the same call site updates it again after an ``optimizer.step()`` and its new node reaches
the remembered one within a few hops, its chain has grown by one step. A chain grown over
:data:`STEPS` optimizer steps is reported at the updating line, once per line. Updates within
one step (a differentiable inner loop, which steps no optimizer) are not counted; a ``_foreach``
update is judged on its first tensor.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any, Optional

import torch

from tensor_dap.agent import frames, naming
from tensor_dap.agent.graph_nodes import graph_node
from tensor_dap.agent.graph_walk import NodeKey, node_key
from tensor_dap.agent.rules import Report
from tensor_dap.agent.tensor_map import TensorMap

#: in-place ops that update their target from another tensor, and their ``_foreach`` forms
UPDATES = frozenset(
    ("add_", "__iadd__", "sub_", "__isub__", "lerp_", "copy_")
    + ("_foreach_add_", "_foreach_sub_", "_foreach_lerp_", "_foreach_copy_")
)
#: optimizer steps a chain grows over before it is reported
STEPS = 3
#: rule_state key: optimizer steps taken so far (counted by ``graph-kept``)
STEPS_TAKEN = "graph-kept.optimizer-steps"
_TRACKED = "graph-kept.updated-tensors"
_REPORTED = "graph-kept.updating-sites"
#: nodes walked from an update's node to find the target's node of the step before
_HOPS = 8
_Tensor = torch.Tensor


@dataclass
class _Chain:
    site: int
    node: NodeKey
    #: optimizer steps taken at the last growth
    step: int
    steps: int = 1
    #: nodes between two steps' updates (``mul_`` then ``add_``: 2)
    per_step: int = 1


def check(args: Any, caller: Any, state: Any) -> Optional[Report]:
    """After an in-place update op (:data:`UPDATES`): remember or grow its target's chain."""
    if not args:
        return None
    target, source = args[0], args[1] if len(args) > 1 else None
    count = 1
    if isinstance(target, (list, tuple)):  # a _foreach update: its first tensor
        count = len(target)
        target = target[0] if target else None
        source = source[0] if isinstance(source, (list, tuple)) and source else source
    if not isinstance(target, _Tensor):
        return None
    node = graph_node(target)
    if node is None:
        return None
    tracked: Optional[TensorMap[_Chain]] = state.rule_state.get(_TRACKED)
    chain: Optional[_Chain] = tracked.get(target) if tracked is not None else None
    if chain is None and not _first_history(node):
        return None  # (a residual `out += identity`: its target had history already)
    if not frames.is_user_code(caller.f_code):
        return None
    site = id(caller.f_code) + caller.f_lasti
    reported: set[int] = state.rule_state.setdefault(_REPORTED, set())
    if site in reported:
        return None
    if tracked is None:
        tracked = state.rule_state[_TRACKED] = TensorMap(capacity=65536)
    step = state.rule_state.get(STEPS_TAKEN, 0)
    hops = _hops_to(node, chain.node) if chain is not None and chain.site == site else None
    if chain is None or hops is None:
        if chain is None or _first_history(node):  # (None: its first history, checked above)
            tracked.set(target, _Chain(site, node_key(node), step))
        return None
    chain.node = node_key(node)
    if step == chain.step:  # updated again within one step: not an update per step
        return None
    chain.step, chain.steps, chain.per_step = step, chain.steps + 1, hops
    if chain.steps < STEPS:
        return None
    reported.add(site)
    if count == 1:
        count = sum(1 for _, other in tracked.items() if other.site == site)
    tensors = [target, source] if isinstance(source, _Tensor) else [target]
    # (a _foreach update's operands are lists: its first tensors are named from the statement)
    foreach = isinstance(args[0], (list, tuple))
    return Report(tensors=tensors, message=_message(chain, count), operands=not foreach)


def from_parameter(args: Any) -> bool:
    """Whether an update's operand is a leaf tensor requiring grad (a parameter)."""
    return any(isinstance(a, _Tensor) and a.requires_grad and a.grad_fn is None for a in args[1:3])


def _first_history(node: Any) -> bool:
    """Whether the update gave its target its first autograd history: the node's first input
    (the target's history before the update) is empty."""
    inputs = node.next_functions
    return bool(inputs) and inputs[0][0] is None


def _hops_to(node: Any, wanted: NodeKey) -> Optional[int]:
    """How many links from ``node`` back to the node named ``wanted`` (breadth first, through
    at most :data:`_HOPS` nodes); None when it is not met."""
    level, depth, walked = [node], 0, 0
    while level and walked < _HOPS:
        depth += 1
        following = []
        for current in level:
            walked += 1
            for parent, _ in current.next_functions:
                if parent is None:
                    continue
                if node_key(parent) == wanted:
                    return depth
                following.append(parent)
        level = following
    return None


def _message(chain: _Chain, count: int) -> Any:
    def build(described: list[Any], expression: str) -> str:
        parts = _update_parts(expression)
        if parts is not None:
            target, source = parts
        else:
            target = described[0].name
            source = described[1].name if len(described) > 1 else None
        foreach = "_foreach_" in expression
        origin = f" from {source}, which carries autograd history," if source else ""
        if not source:
            detached = ""
        elif foreach:
            detached = f" (or update from detached tensors: `[t.detach() for t in {source}]`)"
        else:
            detached = f" (or use `{detached_text(source)}`)"
        tensors = f"each of the {count} tensors updated here" if count > 1 else target
        grows = f"{chain.per_step} node{'s' if chain.per_step > 1 else ''}"
        return (
            f"`{expression}`: {target} is updated in place{origin} outside "
            f"`torch.no_grad()`: autograd records each update, and {tensors} carries autograd "
            f"history, a chain of every step's updates that grows by {grows} each optimizer "
            f"step ({chain.steps} steps so far) for as long as the program trains; backward() "
            "never goes through it, and an evaluation with these tensors builds graphs through "
            f"all of it. Run the update under `with torch.no_grad():`{detached}."
        )

    return build


def _update_parts(expression: str) -> Optional[tuple[str, Optional[str]]]:
    """The updated tensor and what it is updated from, as the statement writes them:
    ``("p_ema", "p")`` of ``p_ema.mul_(d).add_(p, alpha=1 - d)``, ``("pe", "(p - pe) / n")`` of
    ``pe += (p - pe) / n``, the two lists of ``torch._foreach_lerp_(ema, params, w)``; None
    when the text is not one such statement."""
    statement = naming.parsed_statement(expression)
    if isinstance(statement, ast.AugAssign):
        return ast.unparse(statement.target), ast.unparse(statement.value)
    call = statement.value if isinstance(statement, (ast.Expr, ast.Assign)) else None
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
        return None
    arguments = [ast.unparse(a) for a in call.args]
    if call.func.attr.startswith("_foreach_"):
        return (arguments[0], arguments[1]) if len(arguments) > 1 else None
    target = call.func.value
    while (  # `p_ema.mul_(d).add_(...)`: the tensor the in-place calls start from
        isinstance(target, ast.Call)
        and isinstance(target.func, ast.Attribute)
        and target.func.attr.endswith("_")
    ):
        target = target.func.value
    return ast.unparse(target), arguments[0] if arguments else None


def detached_text(term: str) -> str:
    """``value(obs).squeeze(-1).detach()``; ``(a + b).detach()``."""
    simple = re.fullmatch(r"[\w.\[\]()\-, ]*", term) and " " not in term.replace(", ", ",")
    return f"{term}.detach()" if simple else f"({term}).detach()"
