"""Describe a tensor from its metadata only: shape, dtype, device, gradient state, origin.

Never reads data, never syncs a device, never touches autograd state: every attribute read
here is metadata kept on the host. A tensor whose attributes raise is described by a marker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from tensor_dap.agent.provenance import Prov
from tensor_dap.findings import TensorInfo

_DTYPE_NAMES = {
    dtype: str(dtype).replace("torch.", "")
    for dtype in vars(torch).values()
    if isinstance(dtype, torch.dtype)
}


def dtype_name(dtype: Any) -> str:
    return _DTYPE_NAMES.get(dtype) or str(dtype).replace("torch.", "")


def grad_fn_name(tensor: Any) -> Optional[str]:
    try:
        fn = tensor.grad_fn
    except Exception:
        return None
    return type(fn).__name__ if fn is not None else None


@dataclass
class Described:
    """A tensor as named in a finding."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    requires_grad: bool
    grad_fn: Optional[str]
    prov: Optional[Prov]

    @property
    def created(self) -> str:
        """``created at train.py:39 by zeros`` or an empty string when unknown."""
        if self.prov is None:
            return ""
        return f"created at {self.prov.where()} by {self.prov.op}"

    @property
    def shape_text(self) -> str:
        return str(self.shape) if len(self.shape) != 1 else f"({self.shape[0]},)"

    def info(self) -> TensorInfo:
        return TensorInfo(
            name=self.name,
            shape=self.shape,
            dtype=self.dtype,
            device=self.device,
            requires_grad=self.requires_grad,
            grad_fn=self.grad_fn,
            origin=self.prov.origin() if self.prov is not None else None,
        )


def describe_tensor(tensor: Any, name: str, prov: Optional[Prov]) -> Described:
    try:
        shape = tuple(int(s) for s in tensor.shape)
    except Exception:
        shape = ()
    try:
        dtype = dtype_name(tensor.dtype)
    except Exception:
        dtype = "?"
    try:
        device = str(tensor.device)
    except Exception:
        device = "?"
    try:
        requires_grad = bool(tensor.requires_grad)
    except Exception:
        requires_grad = False
    return Described(name, shape, dtype, device, requires_grad, grad_fn_name(tensor), prov)


def summary(tensor: Any) -> str:
    """``tensor<(4, 1) float32 cpu grad AddmmBackward0>``, metadata only."""
    d = describe_tensor(tensor, "", None)
    parts = [d.shape_text, d.dtype, d.device]
    if d.grad_fn:
        parts.append(f"grad {d.grad_fn}")
    elif d.requires_grad:
        parts.append("grad")
    return f"tensor<{' '.join(parts)}>"
