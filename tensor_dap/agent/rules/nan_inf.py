"""``nan-inf``: the first op of user code that produces NaN or Inf from finite inputs.

Opt-in: it must read every floating-point output (on an accelerator, a device sync per op).
The check runs under ``no_grad`` on the output only; inputs are read only when the output is
not finite, to tell "made NaN here" from "passed NaN along".
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from tensor_dap.agent.ops import OpInfo
from tensor_dap.agent.rules import Report, Rule

RULE = Rule(
    id="nan-inf",
    title="NaN / Inf",
    description="An operation produces NaN or Inf from finite inputs (reads data: opt-in).",
    default=False,
)

_Tensor = torch.Tensor


#: factories whose result is uninitialised memory: garbage, NaN included, until written
_UNINITIALISED = ("empty", "new_empty")


def applies(op: OpInfo) -> bool:
    return not op.backward and not op.name.startswith(_UNINITIALISED)


def _finite(tensor: Any) -> bool:
    if not tensor.is_floating_point() and not tensor.is_complex():
        return True
    if tensor.numel() == 0 or tensor.device.type == "meta":
        return True
    with torch.no_grad():
        return bool(torch.isfinite(tensor).all())


def after(op: OpInfo, args: tuple, kwargs: Optional[dict], out: Any, caller: Any, state: Any):
    if not isinstance(out, _Tensor) or _finite(out):
        return None
    inputs = [a for a in args if isinstance(a, _Tensor)]
    if not all(_finite(t) for t in inputs):
        return None
    return Report(tensors=[*inputs, out], message=_message(op.name, out))


def _message(op_name: str, out: Any) -> Any:
    with torch.no_grad():
        nans = int(torch.isnan(out).sum())
        infs = int(torch.isinf(out).sum())

    def build(described: list[Any], expression: str) -> str:
        *inputs, result = described
        names = ", ".join(f"{d.name} {d.shape_text}" for d in inputs) or "inputs"
        return (
            f"`{expression}`: {op_name} produced {nans} NaN and {infs} Inf values "
            f"({result.shape_text} {result.dtype}) from finite {names}."
        )

    return build
