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
from tensor_dap.agent.graph_nodes import accumulates_grad, graph_node
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
#: rule_state key: id() of each optimizer -> its steps so far (counted by ``graph-kept``)
STEPS_BY_OPTIMIZER = "graph-kept.steps-by-optimizer"
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
    site = _site_to_judge(caller, state)
    if site is None:
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
    state.rule_state[_REPORTED].add(site)
    if count == 1:
        count = sum(1 for _, other in tracked.items() if other.site == site)
    tensors = [target, source] if isinstance(source, _Tensor) else [target]
    # (a _foreach update's operands are lists: its first tensors are named from the statement)
    foreach = isinstance(args[0], (list, tuple))
    return Report(tensors=tensors, message=_message(chain, count), operands=not foreach)


#: out-of-place updates that remake the tensor: ``shadow[n] = d * shadow[n] + (1 - d) * p``,
#: ``shadow[n] = torch.lerp(shadow[n], p, 1 - d)``
REBINDS = frozenset(("add", "__add__", "__radd__", "lerp"))
#: rule_state key: call site -> {node key of the tensor it made last: its chain}
_REBOUND = "graph-kept.rebound-updates"
#: chains remembered per call site (a forward mixing a constant and a parameter starts one
#: each time and never grows it: the oldest half goes past this)
_REBOUND_PER_SITE = 4096
#: nodes of a scaling by a number (``d * shadow``, ``p / 2``)
SCALINGS = frozenset(("MulBackward0", "DivBackward0"))


#: what an EMA's operands are made by (``d * shadow``, ``(1 - d) * p``, a previous ``lerp``),
#: where they have history: an add of anything else (a residual ``x + f(x)``) is left after
#: reading its operands' ``grad_fn``
_REBOUND_OPERANDS = SCALINGS | {"LerpBackward0", "LerpBackward1"}


def check_rebound(args: Any, out: Any, caller: Any, state: Any) -> Optional[Report]:
    """After an out-of-place add or ``lerp`` (:data:`REBINDS`) with a result of several
    elements: an EMA of the weights recomputed each step outside ``torch.no_grad()``. Its node
    takes a parameter (possibly scaled) and either nothing with history (the first update, from
    a detached copy) or, scaled, the node this call site made at the step before: the chain of
    that tensor, grown by one step. Reported as :func:`check`'s in-place form is."""
    for operand in args[:2]:
        made_by = graph_node(operand) if isinstance(operand, _Tensor) else None
        if made_by is not None and type(made_by).__name__ not in _REBOUND_OPERANDS:
            return None
    node = graph_node(out)
    if node is None:
        return None
    inputs = [n for n, _ in node.next_functions]
    if len(inputs) != 2:
        return None
    if from_parameter_node(inputs[1]):
        kept, source = inputs[0], inputs[1]
    elif from_parameter_node(inputs[0]):
        kept, source = inputs[1], inputs[0]
    else:
        return None  # (a residual `x + f(x)`: two nodes of the forward's graph)
    if kept is not None and type(kept).__name__ in SCALINGS:
        kept = scaled_input(kept)
        if kept is None:
            return None
    site = _site_to_judge(caller, state)
    if site is None:
        return None
    sites: dict[int, dict[NodeKey, _Chain]] = state.rule_state.setdefault(_REBOUND, {})
    chains = sites.setdefault(site, {})
    step = state.rule_state.get(STEPS_TAKEN, 0)
    chain = chains.pop(node_key(kept), None) if kept is not None else None
    key = node_key(node)
    if chain is None:
        # its first history: from a copy of the weights, detached or a `p.clone()` (which
        # keeps the parameter's history)
        if kept is None or from_parameter_node(kept):
            if len(chains) >= _REBOUND_PER_SITE:
                for old in list(chains)[: _REBOUND_PER_SITE // 2]:
                    del chains[old]
            chains[key] = _Chain(site, key, step)
        return None
    chain.node = key
    chains[key] = chain
    if step == chain.step:  # remade again within one step: not an update per step
        return None
    chain.step, chain.steps = step, chain.steps + 1
    if chain.steps < STEPS:
        return None
    state.rule_state[_REPORTED].add(site)
    statement = naming.statement_text(caller.f_code.co_filename, caller.f_lineno)
    message = _rebound_message(chain, len(chains), statement, _names_of_parameter(source, caller))
    return Report(tensors=[out], message=message, operands=False)


def _names_of_parameter(node: Any, caller: Any) -> set[str]:
    """The local names of the updating frame that are the parameter ``node`` is made of
    (:func:`from_parameter_node`): ``{"p"}``."""
    accumulating = _parameter_node(node)
    parameter = getattr(accumulating, "variable", None) if accumulating is not None else None
    if parameter is None:
        return set()
    try:
        local = frames.read_locals(caller)
    except Exception:
        return set()
    return {name for name, value in local.items() if value is parameter}


def from_parameter_node(node: Any) -> bool:
    """Whether ``node`` is a parameter's ``AccumulateGrad``, or made of a parameter alone by
    at most 2 ops of one input each: a scaling (``(1 - d) * p``), a cast (``p.float()``), a
    view (``p.view(-1)``)."""
    return _parameter_node(node) is not None


def _parameter_node(node: Any, hops: int = 2) -> Any:
    """The ``AccumulateGrad`` node :func:`from_parameter_node` reaches; None when none."""
    for _ in range(hops + 1):
        if node is None or accumulates_grad(node):
            return node
        inputs = [n for n, _ in node.next_functions if n is not None]
        if len(inputs) != 1:
            return None
        node = inputs[0]
    return None


def scaled_input(node: Any) -> Any:
    """The node a scaling by a number (``0.9 * running``, ``p / 2``: :data:`SCALINGS`) takes,
    its only input; None for any other node."""
    if node is None or type(node).__name__ not in SCALINGS:
        return None
    inputs = [n for n, _ in node.next_functions if n is not None]
    return inputs[0] if len(inputs) == 1 else None


def _rebound_message(chain: _Chain, count: int, statement: str, parameters: set[str]) -> Any:
    """``statement``: the updating line's code (the op's own text is the sum only);
    ``parameters``: the names the parameter has there."""
    target, parameter = _rebound_parts(statement, parameters)

    def build(described: list[Any], expression: str) -> str:
        # (the whole statement when it is on its line; else the op's own text)
        expression = statement if naming.parsed_statement(statement) else expression
        tensors = f"each of the {count} tensors made here" if count > 1 else target
        detached = f" (or remake it from `{detached_text(parameter)}`)" if parameter else ""
        return (
            f"`{expression}`: {target} is remade each optimizer step from "
            f"{parameter or 'a parameter'}, which requires grad, outside `torch.no_grad()`: "
            f"autograd records each update, and {tensors} carries autograd history, a chain of "
            f"every step's updates that grows each optimizer step ({chain.steps} steps so far) "
            "for as long as the program trains; backward() never goes through it, and an "
            "evaluation with these tensors builds graphs through all of it. Run the update "
            f"under `with torch.no_grad():`{detached}."
        )

    return build


def _rebound_parts(statement: str, parameters: set[str]) -> tuple[str, str]:
    """``("shadow[n]", "p")`` of ``shadow[n] = d * shadow[n] + (1 - d) * p`` or of
    ``shadow[n] = torch.lerp(shadow[n], p, w)``: the target, and the parameter as the other
    operand writes it (a name of ``parameters``, else its last name); ``("the tensor", "")``
    when not of that form."""
    parsed = naming.parsed_statement(statement)
    if not (isinstance(parsed, ast.Assign) and len(parsed.targets) == 1):
        return "the tensor", ""
    target = ast.unparse(parsed.targets[0])
    value = parsed.value
    if isinstance(value, ast.BinOp):
        sides = [value.left, value.right]
    elif isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        # `torch.lerp(shadow[i], p, w)`; `shadow[i].lerp(p, w)`, `shadow[n].mul(d).add(...)`
        owner = value.func.value
        module = isinstance(owner, ast.Name) and owner.id in ("torch", "F")
        sides = list(value.args[:2]) if module else [owner, *value.args[:1]]
    else:
        return target, ""
    others = [s for s in sides if not any(ast.unparse(n) == target for n in ast.walk(s))]
    if len(others) != 1:
        return target, ""
    walked = list(ast.walk(others[0]))
    # (a name the parameter has in the frame, wherever it is: `p` of `p.mul(1 - d)`)
    named = [n for n in walked if isinstance(n, ast.Name) and n.id in parameters]
    names = [n for n in walked if isinstance(n, (ast.Name, ast.Attribute))]
    names = [n for n in names if not any(n in ast.walk(m) and n is not m for m in names)]
    last = max(named or names, key=lambda n: (n.lineno, n.col_offset), default=None)
    return target, ast.unparse(last) if last is not None else ""


def _site_to_judge(caller: Any, state: Any) -> Optional[int]:
    """The updating call site (code and instruction), None when it is not the program's own
    code or its line was reported already."""
    if not frames.is_user_code(caller.f_code):
        return None
    site = id(caller.f_code) + caller.f_lasti
    reported: set[int] = state.rule_state.setdefault(_REPORTED, set())
    return None if site in reported else site


def from_parameter(args: Any) -> bool:
    """Whether an update's operand is a leaf tensor requiring grad (a parameter)."""
    return any(isinstance(a, _Tensor) and a.requires_grad and a.grad_fn is None for a in args[1:3])


def _first_history(node: Any) -> bool:
    """Whether the update gave its target its first autograd history: the node's first input
    (the target's history before the update) is empty, or a parameter's alone (the target is
    a ``p.clone()`` of the weights, which keeps the parameter's history)."""
    inputs = node.next_functions
    return bool(inputs) and (inputs[0][0] is None or from_parameter_node(inputs[0][0]))


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
