"""A derivative taken without a graph and trained through as a constant (part of ``grad-lost``).

A physics-informed network's residual ``u_t - k * u_xx`` needs the second derivative with
history: ``u_xx = torch.autograd.grad(u_x, x, ones, retain_graph=True)[0]`` (``retain_graph``
but not ``create_graph``) returns it without any, so in the residual it is a number per point:
``loss.backward()`` trains the network through ``u_t`` alone, and ``k`` through a constant.
Nothing raises and the loss has a ``grad_fn``; the fit is just wrong. (Without
``retain_graph`` either, the grad frees the graph and backward() raises: graph-kept says where.)

Judged, so that first-order meta-learning, adversarial examples and fixed targets stay quiet:

- the gradient is taken with respect to plain leaf tensors (``x.requires_grad_()``, the
  collocation points) or tensors made of them only (``torch.cat([x, y], 1)``), not parameters
  or tensors computed from them (first-order MAML's ``p - lr * g`` is meant), of outputs
  computed from parameters (not a fixed density's score);
- the op builds a graph from it and from an operand computed from parameters (not FGSM's
  ``x + eps * g.sign()``, whose other operand is the input itself), and nothing between the
  gradient and the op has no derivative of its own (``sign``, ``round``, comparisons) or takes
  its size or direction (a norm: VAT's and FGM's normalized perturbations of embeddings, a
  saliency's norm as a per-example weight; so a Deep Ritz energy written ``g.norm(dim=1)**2``
  is not judged, ``g.pow(2).sum(1)`` is);
- the ``backward()`` whose graph holds the op trains the parameters (``nn.Parameter``) the
  gradient came from (a teacher's Jacobian matched by a student's is a target).
"""

from __future__ import annotations

import re
from types import FrameType
from typing import Any, Optional

import torch

from tensor_dap.agent import frames, naming
from tensor_dap.agent.graph_nodes import accumulates_grad, graph_node
from tensor_dap.agent.graph_walk import NodeKey, breadth_first, node_key, upstream_leaves
from tensor_dap.agent.provenance import Prov, first_cut, made_through
from tensor_dap.agent.rules import Report
from tensor_dap.agent.rules.hooks import Args

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter

#: rule_state key: (path, line) of each ``torch.autograd.grad`` call seen returning gradients
#: without history, taken w.r.t. plain inputs, of outputs computed from parameters -> ``id()``
#: of those parameters (at its latest call)
_SITES = "grad-lost.frozen-derivative-sites"
#: rule_state key: the graph node of an op's result -> (its user line, the gradient's Prov): by
#: node, as the result is mostly a temporary (``u_t - k * u_xx``'s product) its graph outlives
_USES = "grad-lost.frozen-derivative-uses"
#: uses remembered, at most (the oldest go)
_KEPT_USES = 64
#: the elementwise arithmetic judged
_ARITHMETIC = frozenset(
    {
        "add", "__add__", "__radd__", "sub", "__sub__", "__rsub__", "mul", "__mul__",
        "__rmul__", "div", "__truediv__", "__rtruediv__", "addcmul", "lerp",
    }
)  # fmt: skip
#: ops whose derivative is zero or undefined: a gradient through them is never wanted
_NO_DERIVATIVE = frozenset(
    {
        "sign", "sgn", "round", "floor", "ceil", "trunc", "argmax", "argmin", "gt", "lt",
        "ge", "le", "eq", "ne", "__gt__", "__lt__", "__ge__", "__le__", "__eq__", "__ne__",
        "heaviside", "bool", "long", "int",
        # (and the program's own mark of a constant, on a tensor that had no history anyway)
        "detach", "data",
    }
)  # fmt: skip
#: ops taking a gradient's size or direction: a perturbation (``g / g.norm()``, VAT's and FGM's
#: normalized directions) or a weight (a saliency's norm per example) is a constant on purpose,
#: whereas a PDE residual uses its derivatives as they are
_SIZES = frozenset({"norm", "normalize", "linalg_vector_norm", "linalg_norm", "frobenius_norm"})
#: nodes walked, at most, to find a parameter behind an operand or a use behind a backward()
_WALK_LIMIT = 4096
#: records looked through from an operand back to its gradient
_PARENTS_LIMIT = 32


def note_grad(args: Args, out: Any, caller: Any, state: Any) -> None:
    """A sampled ``torch.autograd.grad(outputs, inputs, ...)`` returned ``out``: its line is
    remembered when it returned gradients without history w.r.t. plain inputs of outputs
    computed from parameters."""
    grads = out if isinstance(out, (tuple, list)) else (out,)
    if len(args) < 2 or not grads:
        return
    if any(isinstance(g, _Tensor) and g.requires_grad for g in grads):  # create_graph=True
        return
    inputs = args[1] if isinstance(args[1], (tuple, list)) else (args[1],)
    if not inputs or not all(_plain_input(t) for t in inputs):
        return
    outputs = args[0] if isinstance(args[0], (tuple, list)) else (args[0],)
    params = _parameters_behind(outputs)
    if not params:
        return
    user = frames.user_frame(caller)
    if user is not None:
        sites: dict[tuple[str, int], frozenset[int]] = state.rule_state.setdefault(_SITES, {})
        sites[(user.f_code.co_filename, user.f_lineno)] = params


def _plain_input(tensor: Any) -> bool:
    """A tensor the program made require grad that is not a parameter nor computed from one:
    a leaf (collocation points), or made of such leaves only (``torch.cat([x, t], 1)``)."""
    if not isinstance(tensor, _Tensor) or not tensor.requires_grad:
        return False
    if tensor.is_leaf:
        return not isinstance(tensor, _Parameter)
    return not _reaches_parameter((tensor,))


def _reaches_parameter(tensors: Any) -> bool:
    """Whether the graph of any of ``tensors`` accumulates into an ``nn.Parameter``."""
    return bool(_parameters_behind(tensors, first=True))


def _parameters_behind(tensors: Any, first: bool = False) -> frozenset[int]:
    """``id()`` of the ``nn.Parameter`` objects among ``tensors`` and those their graphs
    accumulate into (only the first found with ``first``). Parameters only: the points a
    gradient is taken at are leaves too, and a student's Jacobian matched to a teacher's at the
    same points shares them with the teacher (the teacher's is a target, not a bug)."""
    found = {id(t) for t in tensors if isinstance(t, _Parameter)}
    roots = [graph_node(t) for t in tensors if isinstance(t, _Tensor)]
    for node in breadth_first([r for r in roots if r is not None], _WALK_LIMIT):
        if found and first:
            break
        variable = getattr(node, "variable", None) if accumulates_grad(node) else None
        if isinstance(variable, _Parameter):
            found.add(id(variable))
    return frozenset(found)


def observe(name: str, args: Args, out: Any, caller: Any, state: Any) -> None:
    """An arithmetic op ``name`` built a graph (``out``) from an operand without history: it is
    remembered when that operand is such a gradient (or made of one) and another operand was
    computed from parameters."""
    sites: Optional[dict[tuple[str, int], frozenset[int]]] = state.rule_state.get(_SITES)
    if not sites or name not in _ARITHMETIC or not isinstance(out, _Tensor):
        return
    operands = [a for a in args[:3] if isinstance(a, _Tensor)]
    frozen = None
    for item in operands:
        if item.requires_grad:
            continue
        prov = state.provenance.lookup(item)
        cut = first_cut(prov) if prov is not None else None
        if (
            cut is not None
            and cut.op == "grad"
            and (cut.path, cut.line) in sites
            and not made_through(prov, cut, _NO_DERIVATIVE | _SIZES, _PARENTS_LIMIT)
        ):
            frozen = cut
            break
    if frozen is None:
        return
    if not _reaches_parameter([a for a in operands if a.requires_grad]):
        return
    user = frames.user_frame(caller)
    node = graph_node(out)
    if user is not None and node is not None:
        uses: dict[NodeKey, tuple[tuple[str, int], Prov]] = state.rule_state.setdefault(_USES, {})
        uses[node_key(node)] = ((user.f_code.co_filename, user.f_lineno), frozen)
        if len(uses) > _KEPT_USES:
            del uses[next(iter(uses))]


def check(targets: list[Any], caller: FrameType, state: Any) -> Optional[Report]:
    """At a ``backward()`` of ``targets``: the report for a remembered use its graph holds,
    when the backward trains the parameters the gradient came from."""
    uses: Optional[dict[NodeKey, tuple[tuple[str, int], Prov]]] = state.rule_state.get(_USES)
    if not uses:
        return None
    starts = [node for node in map(graph_node, targets) if node is not None]
    trained: Any = False  # (the backward's parameters: walked for the first use found)
    for node in breadth_first(starts, _WALK_LIMIT):
        found = uses.pop(node_key(node), None)
        if found is None:
            continue
        site, cut = found
        trained = upstream_leaves(targets) if trained is False else trained
        behind = state.rule_state.get(_SITES, {}).get((cut.path, cut.line))
        if trained is not None and behind is not None and trained.isdisjoint(behind):
            continue
        user = frames.user_frame(caller)
        return Report(
            tensors=targets[:1],
            message=_message(site, cut, frames.site(user)),
            operands=False,
            frame=user,
            at=site,
        )
    return None


def _message(site: tuple[str, int], cut: Prov, backward: Optional[tuple[str, int]]) -> Any:
    def build(described: list[Any], expression: str) -> str:
        name = described[0].name
        text = naming.statement_text(*site) or expression
        grad = naming.place(cut.path, cut.line)
        at = f" at {naming.place(*backward)}" if backward is not None else ""
        # (the name the gradient was assigned to, when this line reads it: `u_xx`)
        assigned = [n for n in _assigned_names(cut) if re.search(rf"(?<![\w.]){n}(?!\w)", text)]
        what = assigned[0] if assigned else "a factor here"
        never = f", never through {assigned[0]}" if assigned else ""
        return (
            f"`{text}`: {what} is the gradient torch.autograd.grad returned at {grad} without "
            "create_graph=True, which has no history of its own: in this term it is a "
            f"constant, so {name}.backward(){at} trains the parameters it was computed from "
            f"through the term's other factors only{never} (a PDE residual's derivatives, a "
            "gradient penalty must be differentiated again). Pass create_graph=True to that "
            "torch.autograd.grad."
        )

    return build


def _assigned_names(cut: Prov) -> list[str]:
    """The names the statement calling ``torch.autograd.grad`` assigns (``u_xx`` of ``u_xx =
    torch.autograd.grad(u_x, x, ...)[0]``; ``u_x`` and ``u_t`` of ``u_x, u_t = ...``)."""
    target = naming.assignment_target(cut.path, cut.line) or ""
    names = (one.strip() for one in target.strip("()[] ").split(","))
    return [name for name in names if name.isidentifier()]
