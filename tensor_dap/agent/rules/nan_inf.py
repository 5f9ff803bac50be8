"""``nan-inf``: the first op of user code that produces NaN or Inf from finite inputs.

Opt-in: it must read every floating-point output (on an accelerator, a device sync per op).
The check reads the output only; inputs (those inside list/tuple arguments too) are read only
when the output is not finite, to tell "made NaN here" from "passed NaN along". A tensor it
cannot read (a type without ``isfinite``, fake or meta data) makes it skip that op, never the
rest of the run.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

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


_COMPRESSED = (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_plain_dispatch = torch.Tensor.__torch_dispatch__


def _parts(tensor: Any) -> Optional[list[Any]]:
    """The dense tensors holding ``tensor``'s values, or ``None`` when it cannot be judged.

    Tensor types the rule did not write are judged through their storage of values (sparse
    ``values``, a nested tensor's buffer, a wrapper subclass's inner tensors) or not at all:
    ``isfinite`` is not implemented for many of them, and one such op must not switch the rule
    off for the whole run.
    """
    if not tensor.is_floating_point() and not tensor.is_complex():
        return []  # integers, bools and quantized tensors hold no NaN
    kind = type(tensor)
    if kind not in _PLAIN and kind.__torch_dispatch__ is not _plain_dispatch:
        if not is_traceable_wrapper_subclass(tensor):
            return None  # FakeTensor, functorch wrappers, ...: no data to read
        inner_names, _ = tensor.__tensor_flatten__()
        parts: list[Any] = []
        for name in inner_names:
            inner = getattr(tensor, name)
            found = _parts(inner) if isinstance(inner, _Tensor) else []
            if found is None:
                return None
            parts.extend(found)
        return parts
    if tensor.device.type == "meta":
        return None
    layout = tensor.layout
    if layout is torch.sparse_coo:
        return [tensor._values()]
    if layout in _COMPRESSED:
        return [tensor.values()]
    if tensor.is_nested:
        return [tensor.values()]
    if layout is not torch.strided:  # mkldnn...
        return None
    return [tensor]


def _finite(tensor: Any) -> Optional[bool]:
    """Whether every value of ``tensor`` is finite; ``None`` when that cannot be told."""
    parts = _parts(tensor)
    if parts is None:
        return None
    # (a plain subclass's own __torch_function__ and the program's modes do not see our reads)
    with torch._C.DisableTorchFunction():
        for part in parts:
            if part.numel() and not bool(torch.isfinite(part).all()):
                return False
    return True


def _inputs(args: tuple, kwargs: Optional[dict]) -> tuple[list[Any], bool]:
    """The tensors an op received, those inside list/tuple arguments included (one level, like
    the engine: ``torch.stack([t, u])``), and whether they are exactly its positional operands."""
    inputs: list[Any] = []
    direct = True
    for value in (*args, *(kwargs.values() if kwargs else ())):
        if isinstance(value, _Tensor):
            inputs.append(value)
        elif isinstance(value, (list, tuple)):
            items = [item for item in value if isinstance(item, _Tensor)]
            if items:
                inputs.extend(items)
                direct = False
    return inputs, direct and not kwargs


def after(op: OpInfo, args: tuple, kwargs: Optional[dict], out: Any, caller: Any, state: Any):
    if not isinstance(out, _Tensor):
        return None
    try:
        if _finite(out) is not False:
            return None
        inputs, operands = _inputs(args, kwargs)
        # an input holding NaN passed it along; one that cannot be judged might have
        if not all(_finite(t) for t in inputs):
            return None
        message = _message(op.name, out)
    except Exception:  # a tensor type that cannot be judged: skip this op, not the rule
        return None
    return Report(tensors=[*inputs, out], message=message, operands=operands)


def _message(op_name: str, out: Any) -> Any:
    nans = infs = 0
    with torch._C.DisableTorchFunction():
        for part in _parts(out) or ():
            nans += int(torch.isnan(part).sum())
            infs += int(torch.isinf(part).sum())

    def build(described: list[Any], expression: str) -> str:
        *inputs, result = described
        names = ", ".join(f"{d.name} {d.shape_text}" for d in inputs) or "inputs"
        return (
            f"`{expression}`: {op_name} produced {nans} NaN and {infs} Inf values "
            f"({result.shape_text} {result.dtype}) from finite {names}."
        )

    return build
