"""A loss term with no gradient history, made of gradients taken without a graph or of a
detached tensor of the trained parameters (part of ``grad-lost``).

A WGAN-GP critic's gradient penalty is computed from ``torch.autograd.grad(d_out, interpolates,
...)``; without ``create_graph=True`` those gradients have no history, the penalty made of them
is a constant, and ``d_loss = fake.mean() - real.mean() + lambda_gp * gp`` backpropagates
without it: no error, ``d_loss`` keeps its grad_fn, and the critic is never penalised. Likewise
an input-gradient regulariser (R1, a Jacobian or double-backprop penalty).

grad-lost's sampled ``observe`` hands this module each one-number sum (``+``/``-``) that builds a
graph from an operand without history; one whose operand's nearest cut is such a
``torch.autograd.grad`` is remembered (weakly), and the ``backward()`` of a tensor whose graph
holds that sum reports it, at the sum's line. Adding detached terms is common and right (the
straight-through ``z + (q - z).detach()``, a TD target ``r + gamma * q_next.detach()``,
first-order MAML's fast weights ``p - lr * g``): only a one-number sum with a term cut by a
gradient taken without a graph and reduced (a norm, a mean) is judged.

The same holds for a term made of a tensor the program detached (``.detach()``, ``.data``)
from parameters that the ``backward()`` trains: a distillation term written
``log_softmax(student_logits.detach() / T)`` adds a constant, and the student learns from the
cross-entropy alone. A teacher's detached outputs (its parameters are not trained by that
``backward()``) and a term with history of its own (``mse(student, teacher.detach())``) are
not judged.
"""

from __future__ import annotations

from types import FrameType
from typing import Any, Optional

import torch

from tensor_dap.agent import frames, naming
from tensor_dap.agent.graph_nodes import graph_node
from tensor_dap.agent.graph_walk import breadth_first, node_key, upstream_leaves
from tensor_dap.agent.op_kinds import SCALAR_READS
from tensor_dap.agent.provenance import REWRAPS, Prov, first_cut, made_through, roots
from tensor_dap.agent.rules import Report
from tensor_dap.agent.rules.hooks import Args
from tensor_dap.agent.tensor_map import TensorMap

_Tensor = torch.Tensor

#: the sums judged
SUMS = frozenset({"add", "__add__", "__radd__", "sub", "__sub__", "__rsub__", "__iadd__", "add_"})
#: rule_state key: sum result (weakly) -> (its user line, the constant term's Prov, its cut)
_TERMS = "grad-lost.constant-terms"
#: graph nodes walked, at most, from a backward()'s tensors to find a remembered sum
_WALK_LIMIT = 4096

#: ops that make a penalty of the gradients, and the records looked through for one
_REDUCTIONS = frozenset(
    {
        "norm",
        "linalg_norm",
        "linalg_vector_norm",
        "vector_norm",
        "mean",
        "sum",
        "std",
        "var",
        "amax",
        "max",
        "logsumexp",
    }
)
_PARENTS_LIMIT = 64
#: the cuts a program writes to stop a gradient
_STOPS = frozenset({"detach", "data"})

_Term = tuple[tuple[str, int], Prov, Prov]


def observe(name: str, args: Args, out: Any, caller: Any, state: Any) -> None:
    """A sum ``name`` building a graph (``out``) from an operand without history: remembered
    when it is one number and that operand was cut by ``torch.autograd.grad``."""
    if name not in SUMS or not isinstance(out, _Tensor) or out.numel() != 1:
        return
    for item in args[:2]:
        if not isinstance(item, _Tensor) or item.requires_grad:
            continue
        prov = state.provenance.lookup(item)
        cut = first_cut(prov) if prov is not None else None
        if prov is None or cut is None:
            continue
        if cut.op != "grad":  # (a number read out and made a tensor again there may be the
            # cut that matters, with a detached baseline beside it: grad-lost's step says so)
            cut = None if _made_of_numbers(prov) else _stopped(prov)
        if cut is None or not _reduced(prov, cut):
            continue
        site = frames.site(frames.user_frame(caller))
        if site is not None:
            terms: Optional[TensorMap[_Term]] = state.rule_state.get(_TERMS)
            if terms is None:
                terms = state.rule_state[_TERMS] = TensorMap()
            terms.set(out, (site, prov, cut))
        return


def _reduced(prov: Prov, cut: Prov) -> bool:
    """Whether a reduction (a norm, a mean...) made ``prov`` of the gradients ``cut`` gave: a
    penalty, not a gradient step (first-order MAML's ``b - lr * g_b`` of a one-number bias)."""
    return made_through(prov, cut, _REDUCTIONS, _PARENTS_LIMIT)


#: reads of a tensor's values as Python numbers or NumPy data
_READ_OUT = SCALAR_READS | frozenset({"numpy", "tolist", "__array__"})


def _made_of_numbers(prov: Prov) -> bool:
    """Whether ``prov`` runs back to values read out as numbers, or to a tensor made of Python
    or NumPy data (an actor's ``log_prob.item()`` made a tensor again for its loss)."""
    return any(root.op in REWRAPS or root.op in _READ_OUT for root in roots(prov))


def _stopped(prov: Prov) -> Optional[Prov]:
    """The nearest ``.detach()`` or ``.data`` ``prov`` was made of whose parameters upstream are
    known (breadth first through its parents, and each one's nearest cut: a record keeps its
    parents a few generations deep)."""
    queue, seen = [prov], 0
    while queue and seen < _PARENTS_LIMIT:
        record = queue.pop(0)
        seen += 1
        for cut in (record, record.cut_at):
            if cut is not None and cut.op in _STOPS and cut.cut and cut.upstream:
                return cut
        queue.extend(record.parents)
    return None


def check(targets: list[Any], caller: FrameType, state: Any) -> Optional[Report]:
    """At a ``backward()`` of ``targets``: the report for a remembered sum its graph holds."""
    terms: Optional[TensorMap[_Term]] = state.rule_state.get(_TERMS)
    if not terms:
        return None
    by_node: dict[Any, tuple[Any, _Term]] = {}
    for total, term in terms.items():
        node = graph_node(total)
        if node is not None:
            by_node[node_key(node)] = (total, term)
    starts = [node for node in map(graph_node, targets) if node is not None]
    if not by_node or not starts:
        return None
    trained: Optional[frozenset[int]] = None
    for node in breadth_first(starts, _WALK_LIMIT):
        found = by_node.get(node_key(node))
        if found is None:
            continue
        total, (site, _, cut) = found
        terms.pop(total)
        if cut.op != "grad":  # (a detached tensor: of parameters this backward trains?)
            trained = upstream_leaves(targets) if trained is None else trained
            if not trained or not cut.upstream or trained.isdisjoint(cut.upstream):
                continue
        user = frames.user_frame(caller)
        return Report(
            tensors=targets[:1],
            message=_message(cut, frames.site(user)),
            operands=False,
            frame=user,
            at=site,
        )
    return None


def _message(cut: Prov, backward: Optional[tuple[str, int]]) -> Any:
    def build(described: list[Any], expression: str) -> str:
        name = described[0].name
        at = f" at {naming.place(*backward)}" if backward is not None else ""
        if cut.op != "grad":
            return (
                f"`{expression}`: a term of {name} has no gradient history: it is made of a "
                f"tensor cut by {cut.cut} at {naming.place(cut.path, cut.line)} from "
                f"parameters {name}.backward(){at} trains, so it adds a constant and trains "
                f"nothing: those parameters learn from the other terms alone. Leave out the "
                f"{cut.cut} there (detach only what is a target, such as a teacher's output)."
            )
        return (
            f"`{expression}`: a term of {name} has no gradient history: it is made of the "
            f"gradients torch.autograd.grad returned at {naming.place(cut.path, cut.line)} "
            "without create_graph=True, which have none of their own, so it adds a constant "
            f"and trains nothing (a gradient penalty that never penalises; {name}.backward()"
            f"{at} passes it by). Pass create_graph=True to that torch.autograd.grad."
        )

    return build
