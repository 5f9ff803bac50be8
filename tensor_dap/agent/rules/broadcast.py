"""``broadcast``: an elementwise op silently broadcasts inputs of different ranks to more
elements than any input has, as ``(4,) - (4, 1)`` becoming ``(4, 4)``.

No error, just a wrong result (TorchSnooper's ``Linear(2, 1)`` regression whose loss stops at
1.5). A bias add ``(64, 10) + (10,)`` keeps the larger input's size, scalars and 0-dim tensors
never count, and an outer product of equal ranks or written with ``[:, None]`` / ``unsqueeze``
is explicit, so none of these is reported.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

from tensor_dap.agent.ops import OpInfo
from tensor_dap.agent.rules import RANKS_DIFFER, Report, Rule

RULE = Rule(
    id="broadcast",
    title="Silent broadcast",
    description="An elementwise op broadcasts inputs of different ranks to a larger result.",
)

#: before() is None unless tensor operands of different non-zero ranks meet (see before)
SCREEN = RANKS_DIFFER

_Tensor = torch.Tensor
_EXPLICIT = ("None]", "unsqueeze", "None,", "[None", "expand", "outer", "einsum")


def applies(op: OpInfo) -> bool:
    return op.elementwise and not op.inplace


def before(op: OpInfo, args: tuple, kwargs: Optional[dict], caller: Any, state: Any) -> Any:
    # the hot path (every elementwise op): numbers and 0-dim tensors never broadcast anything,
    # and equal ranks are not this rule's business; only then are shapes looked at
    first_rank = 0
    for arg in args:
        if isinstance(arg, _Tensor):
            rank = arg.ndim
            if rank and rank != first_rank:
                if first_rank:
                    return _check(args)
                first_rank = rank
    return None


def _check(args: tuple) -> Optional[Report]:
    """Inputs of different ranks: report when the result has more elements than any input."""
    tensors = [a for a in args if isinstance(a, _Tensor) and a.dim()]
    shapes = [tuple(t.shape) for t in tensors]
    try:
        result = torch.broadcast_shapes(*shapes)
    except RuntimeError:
        return None  # PyTorch raises its own error
    if math.prod(result) <= max(math.prod(s) for s in shapes):
        return None
    return Report(tensors=tensors, message=_message(tuple(result)))


def _message(result: tuple[int, ...]) -> Any:
    def build(described: list[Any], expression: str) -> Any:
        if any(marker in expression for marker in _EXPLICIT):
            return None
        parts = ", ".join(f"{d.name} {d.shape_text}" for d in described)
        small = min(described, key=lambda d: len(d.shape))
        big = max(described, key=lambda d: len(d.shape))
        return (
            f"`{expression}`: {parts} broadcast to {result}, more elements than any input. "
            f"If they should match, reshape one (e.g. {big.name}.squeeze(-1) or "
            f"{small.name}.unsqueeze(-1)); write [:, None] to make an outer op explicit."
        )

    return build
