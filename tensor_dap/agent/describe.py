"""Describe a tensor from its metadata only: shape, dtype, device, gradient state, origin.

Never reads data, never syncs a device, never touches autograd state: every attribute read
here is metadata kept on the host. A tensor whose attributes raise is described by a marker.
How the metadata is written (shape, dtype) is :mod:`tensor_dap.tensor_text`'s, shared with the
Variables view, the line tracer and the language server.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

import torch

from tensor_dap.agent.provenance import Prov
from tensor_dap.findings import TensorInfo
from tensor_dap.tensor_text import dtype_name, grad_fn_name, shape_text


@dataclass
class Described(TensorInfo):
    """A tensor as named in a finding: the :class:`TensorInfo` the finding carries (its
    ``origin`` filled in from ``prov``), and the creation record the rules' messages quote."""

    prov: Optional[Prov] = None

    def __post_init__(self) -> None:
        if self.origin is None and self.prov is not None:
            self.origin = self.prov.origin()

    @property
    def created(self) -> str:
        """``created at train.py:39 by zeros`` or an empty string when unknown. A detached copy
        (``loss.detach().cpu()``) names where the tensor it was detached from was made: ``created
        at train.py:31 by mean, detached at train.py:36``, not a line that says ``by detach``."""
        prov = self.prov
        if prov is None:
            return ""
        source = _detached_from(prov)
        if source is None:
            return f"created at {prov.where()} by {prov.op}"
        detached = (
            "then detached" if source.where() == prov.where() else f"detached at {prov.where()}"
        )
        return f"created at {source.where()} by {source.op}, {detached}"

    @property
    def shape_text(self) -> str:
        return shape_text(self.shape)

    def info(self) -> TensorInfo:
        """The finding's record of the tensor, without the creation record's internals."""
        return TensorInfo(**{field.name: getattr(self, field.name) for field in fields(TensorInfo)})


def _detached_from(prov: Prov) -> Optional[Prov]:
    """The record of the tensor ``prov``'s ``detach()`` (of a chain of them) was called on,
    when known; None for a tensor made otherwise."""
    source = None
    while prov.op == "detach" and prov.detached_from is not None:
        prov = source = prov.detached_from
    return source


#: tensor types whose metadata reads go to no ``__torch_function__``
_PLAIN_TENSORS = frozenset((torch.Tensor, torch.nn.Parameter))

Fields = tuple[tuple[int, ...], str, str, bool, Optional[str]]


def tensor_fields(tensor: Any) -> Fields:
    """Shape, dtype name, device, requires_grad and grad_fn name; a field that cannot be read
    is ``()``, ``"?"``, ``"?"``, False or None. Read with subclasses' ``__torch_function__``
    off: describing a tensor (a trace line, the debugger's VARIABLES) is no op of the program,
    and a subclass that logs its calls must not see it."""
    if type(tensor) in _PLAIN_TENSORS:
        return _read_fields(tensor)
    with torch._C.DisableTorchFunctionSubclass():
        return _read_fields(tensor)


def _read_fields(tensor: Any) -> Fields:
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
    return shape, dtype, device, requires_grad, grad_fn_name(tensor)


def describe_tensor(tensor: Any, name: str, prov: Optional[Prov]) -> Described:
    return Described(name, *tensor_fields(tensor), prov=prov)
