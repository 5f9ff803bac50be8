"""``graph-kept``'s in-place form: a tensor updated in place from a parameter at every
optimizer step, outside ``torch.no_grad()``.

An exponential moving average of the weights written by hand,

    for p_ema, p in zip(ema.parameters(), model.parameters()):
        p_ema.mul_(decay).add_(p, alpha=1 - decay)

(or ``p_ema.lerp_(p, 1 - decay)``; a hand-written SWA average) without ``torch.no_grad()``
gives each EMA tensor a ``grad_fn``: ``add_`` records the parameter's use, and the next step's
``mul_`` and ``add_`` chain onto that node. Nothing raises (the EMA tensors do not require
grad, so PyTorch allows the in-place update); every step adds a few nodes to every EMA tensor's
chain, for as long as the program trains, and an evaluation with the EMA model builds graphs
through all of it. ``timm``'s ``ModelEmaV2`` and every careful implementation run the update
under ``torch.no_grad()``.

Seen here: an in-place add or interpolation (:data:`UPDATES`) of user code whose operand is a
leaf tensor requiring grad (a parameter: a residual ``out += identity`` is left after one
attribute read) and whose target now has a ``grad_fn``. Each target is remembered weakly with
its node; when the same call site updates it again after an ``optimizer.step()`` and its new
node reaches the remembered one within a few hops, its chain has grown by one step. A chain
grown over :data:`STEPS` optimizer steps is reported at the updating line, once per line.
Updates within one step (a differentiable inner loop, which steps no optimizer) are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from tensor_dap.agent import frames
from tensor_dap.agent.graph_nodes import graph_node
from tensor_dap.agent.graph_walk import NodeKey, node_key
from tensor_dap.agent.rules import Report
from tensor_dap.agent.tensor_map import TensorMap

#: in-place ops that update their target from another tensor
UPDATES = frozenset(("add_", "__iadd__", "sub_", "__isub__", "lerp_"))
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


def from_parameter(args: Any) -> bool:
    """Whether an update's operand is a leaf tensor requiring grad (cheap: a residual ``out +=
    identity`` is left here)."""
    return any(_is_parameter(a) for a in args[1:3])


def check(args: Any, out: Any, caller: Any, state: Any) -> Optional[Report]:
    """After an in-place update op (:data:`UPDATES`) from a parameter: remember or grow its
    target's chain."""
    if not args or out is not args[0] or not isinstance(out, _Tensor):
        return None
    source = next((a for a in args[1:3] if _is_parameter(a)), None)
    if source is None:
        return None
    node = graph_node(out)
    if node is None or not frames.is_user_code(caller.f_code):
        return None
    site = id(caller.f_code) + caller.f_lasti
    reported: set[int] = state.rule_state.setdefault(_REPORTED, set())
    if site in reported:
        return None
    tracked: Optional[TensorMap[_Chain]] = state.rule_state.get(_TRACKED)
    if tracked is None:
        tracked = state.rule_state[_TRACKED] = TensorMap(capacity=65536)
    step = state.rule_state.get(STEPS_TAKEN, 0)
    chain: Optional[_Chain] = tracked.get(out)
    hops = _hops_to(node, chain.node) if chain is not None and chain.site == site else None
    if chain is None or hops is None:
        tracked.set(out, _Chain(site, node_key(node), step))
        return None
    chain.node = node_key(node)
    if step == chain.step:  # updated again within one step: not an update per step
        return None
    chain.step, chain.steps, chain.per_step = step, chain.steps + 1, hops
    if chain.steps < STEPS:
        return None
    reported.add(site)
    count = sum(1 for _, other in tracked.items() if other.site == site)
    return Report(tensors=[out, source], message=_message(chain, count))


def _is_parameter(value: Any) -> bool:
    return isinstance(value, _Tensor) and value.requires_grad and value.grad_fn is None


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
        target, source = described[0].name, described[1].name
        target = target.split(".", 1)[0] if "." in target and "(" in target else target
        tensors = f"each of the {count} tensors updated here" if count > 1 else target
        grows = f"{chain.per_step} node{'s' if chain.per_step > 1 else ''}"
        return (
            f"`{expression}`: {target} is updated in place from {source}, which requires grad, "
            f"outside `torch.no_grad()`: autograd records each update, and {tensors} carries "
            f"autograd history, a chain of every step's updates that grows by {grows} each "
            f"optimizer step ({chain.steps} steps so far) for as long as the program trains; "
            "backward() never "
            "goes through it, and an evaluation with these tensors builds graphs through all of "
            f"it. Run the update under `with torch.no_grad():` (or use `{source}.detach()`)."
        )

    return build
