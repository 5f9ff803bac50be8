"""``grad-lost``: ``backward()`` on a tensor that has no gradient history.

PyTorch raises "element 0 of tensors does not require grad and does not have a grad_fn" and
says nothing of why. Reported at the ``backward()`` line before that happens, naming the line
where the history was cut (``.detach()``, ``.data``, re-wrapping with ``torch.tensor``, an op
under ``no_grad``) — or, when nothing it came from ever required grad, the tensors it was
computed from and where they were created.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from tensor_dap.agent import naming
from tensor_dap.agent.ops import OpInfo
from tensor_dap.agent.provenance import Prov, first_cut, roots
from tensor_dap.agent.rules import Report, Rule

RULE = Rule(
    id="grad-lost",
    title="grad_fn lost",
    description="backward() is called on a tensor with no gradient history.",
)

_Tensor = torch.Tensor


def applies(op: OpInfo) -> bool:
    return op.backward


def _targets(op: OpInfo, args: tuple, kwargs: Optional[dict]) -> list[Any]:
    """The tensors backward starts from: ``self``, ``tensors`` or ``outputs``."""
    first: Any = args[0] if args else None
    if first is None and kwargs:
        first = kwargs.get("tensors", kwargs.get("outputs"))
    if isinstance(first, _Tensor):
        return [first]
    if isinstance(first, (list, tuple)):
        return [t for t in first if isinstance(t, _Tensor)]
    return []


def before(op: OpInfo, args: tuple, kwargs: Optional[dict], caller: Any, state: Any) -> Any:
    for tensor in _targets(op, args, kwargs):
        if not tensor.requires_grad:
            prov = state.provenance.lookup(tensor)
            return Report(tensors=[tensor], message=_explain(prov))
    return None


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
        if cut is not None:
            return (
                f"{head}: its gradient history was cut at {_where(cut)} by {cut.cut}. "
                f"Compute {name} from tensors that keep their grad_fn there."
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
