"""A module's tensor kept as a plain attribute, which ``model.to(device)`` leaves behind.

``self.mask = torch.tril(torch.ones(T, T))`` in ``__init__`` (minGPT's causal mask, a
positional table, a class-weight vector) is no parameter and no buffer: ``model.to("cuda")``,
``model.cuda()`` and ``model.half()`` move parameters and buffers only, so the forward meets it
on the CPU: ``att.masked_fill(self.mask[:, :, :T, :T] == 0, ...)`` raises a device mismatch
whose operand is the comparison, made on the failing line. Moving that operand with
``.to(device)`` at every call is the wrong fix; registering the tensor as a buffer is the right
one. :func:`held` finds, for device-mismatch's operands, the plain attribute of the calling
module each one was computed from (the attribute itself, a view sharing its storage, or a
result its creation record leads back to), and :func:`explained` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from tensor_dap.agent import frames
from tensor_dap.agent.provenance import Prov

_Tensor = torch.Tensor
#: creation records walked back from an operand to find the attribute's
_ANCESTORS = 24


@dataclass(frozen=True)
class PlainAttribute:
    """``self.mask`` of a ``CausalSelfAttention``, made at ``model.py:12`` (when known)."""

    name: str
    attribute: str
    owner: str
    made_at: Optional[str]


def held(operands: list[Any], caller: Any, state: Any) -> dict[int, PlainAttribute]:
    """``id(operand)`` -> the plain attribute of the user frame's ``self`` (a module) it
    comes from, for the CPU operands that come from one."""
    user = frames.user_frame(caller)
    owner = frames.read_locals(user).get("self") if user is not None else None
    if not isinstance(owner, torch.nn.Module):
        return {}
    attributes = [
        (name, value)
        for name, value in vars(owner).items()
        if isinstance(value, _Tensor) and value.is_cpu
    ]
    if not attributes:
        return {}
    provenance = getattr(state, "provenance", None)
    found = {}
    for operand in operands:
        if not isinstance(operand, _Tensor) or not operand.is_cpu:
            continue
        for name, value in attributes:
            if _comes_from(operand, value, provenance):
                prov = provenance.lookup(value) if provenance is not None else None
                made_at = prov.where() if prov is not None else None
                found[id(operand)] = PlainAttribute(
                    f"self.{name}", name, type(owner).__name__, made_at
                )
                break
    return found


def _comes_from(operand: Any, attribute: Any, provenance: Any) -> bool:
    if operand is attribute or _same_storage(operand, attribute):
        return True
    if provenance is None:
        return False
    origin = provenance.lookup(attribute)
    record = provenance.lookup(operand)
    if origin is None or record is None:
        return False
    queue: list[Prov] = [record]
    for _ in range(_ANCESTORS):
        if not queue:
            return False
        prov = queue.pop(0)
        if prov.made == origin.made:
            return True
        queue.extend(prov.parents)
    return False


def _same_storage(a: Any, b: Any) -> bool:
    try:
        pointer = a.untyped_storage().data_ptr()
        return bool(pointer) and pointer == b.untyped_storage().data_ptr()
    except Exception:  # sparse, nested, wrapper subclasses: no storage of their own
        return False


def explained(attribute: PlainAttribute) -> str:
    """The sentence that leads to the fix."""
    made = f" (made at {attribute.made_at})" if attribute.made_at else ""
    return (
        f"{attribute.name} is a plain tensor attribute of {attribute.owner}{made}: "
        f"model.to(device) moves parameters and buffers, not plain attributes. Register it in "
        f'__init__ with self.register_buffer("{attribute.attribute}", ..., persistent=False) '
        f"and it moves with the model (or wrap it in nn.Parameter(...) if it is to be learned)."
    )
