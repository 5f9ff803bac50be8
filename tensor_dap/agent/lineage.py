"""How a tensor without gradient history came to lack it: the :class:`Prov` the watch keeps
for such a tensor (for ``grad-lost``).

A tensor made from inputs that required grad, by an op that keeps no history (``detach``,
``.data``, ``torch.tensor(t)``, any op under ``no_grad``), records the *cut*; one made from
tensors without history records their Provs as parents (a few generations deep, see
:data:`~tensor_dap.agent.provenance.MAX_DEPTH`) and the nearest cut upstream, so the rule can
name the line that cut the graph however long the computation after it.
"""

from __future__ import annotations

from types import FrameType
from typing import Any, Iterator, Optional

import torch

from tensor_dap.agent.graph_walk import upstream_leaves
from tensor_dap.agent.no_grad_source import no_grad_site
from tensor_dap.agent.provenance import (
    MAX_DEPTH,
    SHALLOW_FAN_IN,
    SHALLOW_GENERATIONS,
    Prov,
    ProvenanceRegistry,
)

_Tensor = torch.Tensor
_SEQUENCES = (list, tuple)

#: how many tensors of one list argument (``torch.cat(pieces)``) provenance looks at
_LIST_INPUTS = 64


def argument_items(args: tuple[Any, ...]) -> Iterator[Any]:
    """Each argument, and the first items of each list or tuple argument (``torch.cat(pieces)``,
    ``_VF.gru(x, h, self._flat_weights)``): what the watch looks at of an op's inputs."""
    for arg in args:
        if arg.__class__ in _SEQUENCES:
            yield from arg[:_LIST_INPUTS]
        else:
            yield arg


def tensor_identity(tensor: Any) -> tuple[int, int]:
    """``id()`` and data address of a tensor: a tensor alive now with both is the one seen
    (an id alone may be a freed tensor's, reused)."""
    try:
        address = int(tensor.data_ptr())
    except Exception:  # sparse, nested, a wrapper subclass without storage
        address = 0
    return id(tensor), address


def history(
    op_name: str, args: tuple[Any, ...], user: FrameType, registry: ProvenanceRegistry
) -> Prov:
    """The Prov of a tensor without gradient history made by ``op_name`` from ``args`` at
    ``user``'s line: its parents' Provs, or the cut, when an input required grad. Inputs
    inside list and tuple arguments count (``torch.cat(pieces)``, ``torch.tensor([a, b])``), and
    so do numbers read from tensors with history (``torch.tensor([loss.item(), ...])``)."""
    parents: list[Prov] = []
    cut: Optional[str] = None
    untracked = False
    unrecorded: list[tuple[int, int]] = []
    #: the inputs whose history this op cuts
    cut_from: list[Any] = []
    grad_enabled = torch.is_grad_enabled()
    if op_name in _SHAPE_FROM:  # (what they take only the shape or dtype of is no input)
        args = args[:1] if op_name.endswith("_as") else ()
    listed = any(arg.__class__ in _SEQUENCES for arg in args)
    for item in argument_items(args):
        if item.__class__ is list:  # torch.tensor(h.tolist()): the lists' first number
            while item.__class__ is list and item:
                item = item[0]
        if item.__class__ is float:  # a number read by .item() from a tensor with history
            read = registry.lookup_number(item)
            if read is not None:
                parents.append(read)
        elif item.__class__.__name__ == "ndarray":  # torch.as_tensor(h.detach().numpy())
            interface = getattr(item, "__array_interface__", None)  # (not cupy's)
            if isinstance(interface, dict) and isinstance(interface.get("data"), tuple):
                handed = registry.lookup_array(interface["data"][0])
                if handed is not None:
                    parents.append(handed)
        elif isinstance(item, _Tensor):
            if item.requires_grad:
                cut = _cut_description(op_name, grad_enabled, listed)
                cut_from.append(item)
            else:
                parent = registry.lookup(item)
                if parent is not None:
                    parents.append(parent)
                else:
                    untracked = True
                    unrecorded.append(tensor_identity(item))
    cut_at = next((p.cut_at for p in parents if p.cut_at is not None), None)
    depth = 1 + max((p.depth for p in parents), default=0)
    if depth > MAX_DEPTH:  # (the inputs' own records, copied short: the op before is known)
        parents = [p.shallow(SHALLOW_GENERATIONS - 1) for p in parents[:SHALLOW_FAN_IN]]
        depth = 1 + max((p.depth for p in parents), default=0)
    site = no_grad_site(user) if cut is not None and not grad_enabled else None
    path, line = user.f_code.co_filename, user.f_lineno
    upstream = _upstream(cut_from, parents) if cut_from else None
    prov = Prov(path, line, op_name, cut, tuple(parents), depth, cut_at, site, untracked, upstream)
    if unrecorded:
        prov.unrecorded = tuple(unrecorded)
    if op_name == "detach" and len(cut_from) == 1:
        prov.detached_from = registry.lookup(cut_from[0])
    return prov


#: ops that read only the shape, dtype or device of some tensor arguments: all of them for
#: ``zeros_like(x)`` and ``x.new_zeros(n)``, the other's for ``idx.expand_as(msg)``; the result
#: carries none of their history, so it cuts none
_SHAPE_FROM = frozenset(
    ("expand_as", "view_as", "reshape_as", "type_as")
    + tuple(f"{kind}_like" for kind in ("zeros", "ones", "empty", "full", "rand", "randn"))
    + ("randint_like", "new_zeros", "new_ones", "new_empty", "new_full")
)


def _upstream(cut_from: list[Any], parents: list[Prov]) -> Optional[frozenset[int]]:
    """The parameters whose gradient flowed into what this op cuts: those the inputs it cuts
    were computed from, and those of the cuts its other inputs come from (a teacher's forward
    under ``no_grad``, one op after the other); None when none is known."""
    found = upstream_leaves(cut_from)
    if found is None:
        return None
    for parent in parents:  # (a chain of ops under no_grad: the earlier cuts' parameters)
        earlier = parent.cut_at.upstream if parent.cut_at is not None else None
        if earlier is not None and not earlier <= found:
            found = found | earlier
    return found


#: how a cut by an op that has no gradient (argmax, comparisons) ends
NO_GRADIENT = ", which has no gradient"


#: how a re-wrap of a list of tensors ends (``torch.tensor([a, b])``: ``torch.stack`` keeps them)
_OF_A_LIST = " of a list"


def _cut_description(op_name: str, grad_enabled: bool, listed: bool = False) -> str:
    """How ``op_name`` cut the history of an input that required grad (``listed``: an item of
    a list or tuple argument)."""
    if not grad_enabled:
        return f"{op_name} under torch.no_grad()"
    if op_name == "data":
        return ".data"
    if op_name in ("detach", "detach_"):
        return "detach()"
    if op_name in ("tensor", "as_tensor", "new_tensor", "from_numpy"):
        return f"torch.{op_name}(...) re-wrapping" + (_OF_A_LIST if listed else "")
    return f"{op_name}(){NO_GRADIENT}"
