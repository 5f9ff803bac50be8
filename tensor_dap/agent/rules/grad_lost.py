"""``grad-lost``: ``backward()`` on a tensor that has no gradient history.

PyTorch raises "element 0 of tensors does not require grad and does not have a grad_fn" and
says nothing of why. Reported at the ``backward()`` line before that happens, naming the line
where the history was cut (``.detach()``, ``.data``, re-wrapping with ``torch.tensor``, an op
under ``no_grad``) — or, when nothing it came from ever required grad, the tensors it was
computed from and where they were created.

It goes one step further at ``optimizer.step()``: a parameter that took part in this step's
forward (an op with grad enabled used it) but got no gradient had its history cut inside the
forward — a silent bug PyTorch never reports. Learned from sampled ops, so it looks at the
first steps of each loop, which is where such a bug shows.
"""

from __future__ import annotations

from types import FrameType
from typing import Any, Optional

import torch

from tensor_dap import catalog
from tensor_dap.agent import frames, naming, optimizers
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.optimizers import Subscriber
from tensor_dap.agent.provenance import Prov, first_cut, roots, untracked_input
from tensor_dap.agent.rules import Report, _step
from tensor_dap.agent.rules.hooks import Args, Kwargs, RuleState
from tensor_dap.agent.tensor_map import TensorMap

RULE = catalog.rule("grad-lost")

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter


def applies(op: OpInfo) -> bool:
    return op.backward


def backward_targets(op: OpInfo, args: Args, kwargs: Kwargs) -> list[Any]:
    """The tensors backward starts from: ``self``, ``tensors`` or ``outputs``."""
    first: Any = args[0] if args else None
    if first is None and kwargs:
        first = kwargs.get("tensors", kwargs.get("outputs"))
    if isinstance(first, _Tensor):
        return [first]
    if isinstance(first, (list, tuple)):
        return [t for t in first if isinstance(t, _Tensor)]
    return []


def before(op: OpInfo, args: Args, kwargs: Kwargs, caller: Any, state: Any) -> Any:
    for tensor in backward_targets(op, args, kwargs):
        if not tensor.requires_grad:
            prov = state.provenance.lookup(tensor)
            return Report(tensors=[tensor], message=_explain(prov))
    return None


#: rule_state key: parameter -> where a forward used it (a TensorMap)
_USED = "grad-lost.used-params"
_UNUSED = object()


def observe(op: OpInfo, args: Args, out: Any, caller: Any, state: Any) -> None:
    """Remember parameters used by ops that build a graph (grad enabled)."""
    if not torch.is_grad_enabled():
        return
    for arg in args:
        # (Parameter's isinstance is a Python call: only tensors that could be one get there)
        if isinstance(arg, _Tensor) and arg.requires_grad and isinstance(arg, _Parameter):
            used = state.rule_state.get(_USED)
            if used is None:
                used = state.rule_state[_USED] = TensorMap()
            if used.get(arg, _UNUSED) is _UNUSED:
                user = frames.user_frame(caller)
                where = Prov(user.f_code.co_filename, user.f_lineno, op.name) if user else None
                used.set(arg, where)


def install(state: RuleState) -> list[Any]:
    def check(optimizer: Any, caller: FrameType) -> Optional[Report]:
        return _params_without_grad(optimizer, state)

    return [optimizers.subscribe(Subscriber(before_step=_step.before_step(RULE.id, state, check)))]


def _params_without_grad(optimizer: Any, state: Any) -> Optional[Report]:
    used = state.rule_state.get(_USED)
    if not used:
        return None
    missing = []
    for group in optimizer.param_groups:
        for param in group["params"]:
            where = used.pop(param, _UNUSED)
            if where is not _UNUSED and param.grad is None:
                missing.append((param, where))
    if not missing:
        return None
    return Report(
        tensors=[p for p, _ in missing[:4]],
        message=_no_grad_message(len(missing), [w for _, w in missing[:4]]),
        operands=False,
    )


def _no_grad_message(count: int, wheres: list[Optional[Prov]]) -> Any:
    def build(described: list[Any], expression: str) -> str:
        parts = []
        for d, where in zip(described, wheres):
            used_at = f" (used at {where.where()} by {where.op})" if where else ""
            parts.append(f"{d.name} {d.shape_text}{used_at}")
        if count > len(parts):
            parts.append(f"and {count - len(parts)} more")
        return (
            f"`{expression}`: {count} parameter(s) took part in this step's forward but got no "
            f"gradient: {', '.join(parts)}. Their history was cut between that use and the loss "
            "(.detach(), .data, torch.tensor(...), .item()/.tolist(), a no_grad block)."
        )

    return build


def _where(prov: Prov) -> str:
    text = naming.source_line(prov.path, prov.line)
    code = f" `{text}`" if text else ""
    return f"{prov.where()}{code}"


def _explain(prov: Optional[Prov]) -> Any:
    def build(described: list[Any], expression: str) -> str:
        name = described[0].name
        head = f"`{expression}`: {name} has no grad_fn and does not require grad"
        if prov is None:
            return head + "; it was created outside the watched code, so its origin is unknown."
        cut = first_cut(prov)
        if cut is not None and cut.cut_site is not None:
            site = Prov(*cut.cut_site, op="")
            return (
                f"{head}: its gradient history was cut at {_where(site)}, which turns "
                f"gradients off around {_where(cut)} ({cut.op} ran without recording them). "
                f"Compute {name} outside that block, or remove it where gradients are needed."
            )
        if cut is not None:
            return (
                f"{head}: its gradient history was cut at {_where(cut)} by {cut.cut}. "
                f"Compute {name} from tensors that keep their grad_fn there."
            )
        gap = untracked_input(prov)
        if gap is not None:
            return (
                f"{head}. Its history runs back to {_where(gap)}, whose input tensor tensor-dap "
                "did not record (a line that ran many times is followed one run in 64). Look "
                "upstream of it for where the graph is cut: .detach(), .data, torch.tensor(...), "
                ".item()/.tolist(), or an op under torch.no_grad()."
            )
        sources = []
        for root in roots(prov):
            label = naming.assignment_target(root.path, root.line) or "a tensor"
            sources.append(f"{label} (created at {root.where()} by {root.op})")
        listed = ", ".join(sources) if sources else f"its inputs at {prov.where()}"
        return (
            f"{head}: nothing it was computed from requires grad: {listed}. "
            "Create the tensors to train with requires_grad=True (or make them nn.Parameters)."
        )

    return build
