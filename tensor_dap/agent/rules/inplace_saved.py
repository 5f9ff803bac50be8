"""``inplace-saved``: an in-place op modifies a tensor that autograd saved for backward.

PyTorch notices only later, in ``backward()`` ("one of the variables needed for gradient
computation has been modified by an inplace operation"), far from the line that did it. This
rule looks before each in-place op of user code: it walks the live autograd graphs (from the
tensor itself and the tensors with a ``grad_fn`` held by the variables of the user's frames —
the outputs a later ``backward()`` will start from) and checks the tensors each node saved; one
that shares storage with the target — and so its version counter — will make backward fail.
Nothing is done on other ops: the rule costs nothing until an in-place op runs.
Saved-tensor hooks are not used: installing them switches off PyTorch's own
version check, which would change the program.

Parameter updates under ``torch.no_grad()`` on leaf tensors are how optimizers work; they are
not reported.
"""

from __future__ import annotations

import collections
import re
from typing import Any, Optional

import torch

from tensor_dap.agent import frames, naming
from tensor_dap.agent.ops import OpInfo
from tensor_dap.agent.provenance import NODE_PROV_KEY, Prov
from tensor_dap.agent.rules import Report, Rule

RULE = Rule(
    id="inplace-saved",
    title="In-place on saved tensor",
    description="An in-place operation modifies a tensor autograd saved for backward.",
)

_Tensor = torch.Tensor
_MAX_NODES = 5000
_SAVED_ATTRS: dict[type, tuple[str, ...]] = {}


def applies(op: OpInfo) -> bool:
    """Only in-place ops (``add_``, ``__setitem__``, ``copy_``...) are checked: every other op
    leaves the plan without a call."""
    return op.inplace and not op.passthrough


def before(op: OpInfo, args: tuple, kwargs: Optional[dict], caller: Any, state: Any) -> Any:
    if not op.inplace or not args or not isinstance(args[0], _Tensor):
        return None
    if not frames.is_user_code(caller.f_code):
        return None
    target = args[0]
    if not torch.is_grad_enabled() and target.is_leaf and target.requires_grad:
        return None
    roots = [t.grad_fn for t in (target, target._base) if t is not None and t.grad_fn is not None]
    roots.extend(_roots_in_frames(caller))
    if not roots:
        return None
    found = _find_saver(roots, _storage_key(target))
    if found is None:
        return None
    return Report(tensors=[target], message=_message(op.name, found))


def _roots_in_frames(frame: Any, depth: int = 6) -> list[Any]:
    """``grad_fn`` of the tensors held by local variables of ``frame`` and its callers."""
    roots = []
    while frame is not None and depth > 0:
        try:
            values = list(frame.f_locals.values())
        except Exception:
            values = []
        for value in values:
            items = value if isinstance(value, (list, tuple)) else (value,)
            for item in items[:64]:
                if isinstance(item, _Tensor) and item.grad_fn is not None:
                    roots.append(item.grad_fn)
        frame = frame.f_back
        depth -= 1
    return roots


def _storage_key(tensor: Any) -> Any:
    """What identifies the memory (and so the version counter) a tensor writes to.

    Wrapper tensor subclasses whose storage is a placeholder can say better by defining
    ``__tensor_dap_storage_key__(self)`` (the stand-in accelerator does).
    """
    custom = getattr(type(tensor), "__tensor_dap_storage_key__", None)
    try:
        if custom is not None:
            return custom(tensor)
        return tensor.untyped_storage()._cdata
    except Exception:
        return None


def _saved_attrs(node: Any) -> tuple[str, ...]:
    kind = type(node)
    names = _SAVED_ATTRS.get(kind)
    if names is None:
        names = tuple(
            n
            for n in dir(node)
            if n.startswith("_saved_") and not n.endswith(("_sym_sizes", "_sym_strides"))
        )
        _SAVED_ATTRS[kind] = names
    return names


def _find_saver(roots: list[Any], key: Any) -> Optional[Any]:
    """The first live node that saved a tensor with storage ``key``."""
    if key is None:
        return None
    seen: set[int] = set()
    queue = collections.deque(roots)
    while queue and len(seen) < _MAX_NODES:
        node = queue.popleft()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for attr in _saved_attrs(node):
            try:
                value = getattr(node, attr)
            except RuntimeError:  # saved tensors already freed by a backward pass
                break
            except Exception:
                continue
            values = value if isinstance(value, (tuple, list)) else (value,)
            for item in values:
                if isinstance(item, _Tensor) and _storage_key(item) == key:
                    return node
        queue.extend(next_node for next_node, _ in node.next_functions)
    return None


def _op_of(node: Any) -> tuple[str, Optional[Prov]]:
    prov = node.metadata.get(NODE_PROV_KEY) if hasattr(node, "metadata") else None
    if isinstance(prov, Prov):
        return prov.op, prov
    name = re.sub(r"Backward\d*$", "", type(node).__name__)
    return name.lower() or type(node).__name__, None


def _message(op_name: str, node: Any) -> Any:
    saver, prov = _op_of(node)

    def build(described: list[Any], expression: str) -> str:
        d = described[0]
        where = ""
        if prov is not None:
            text = naming.source_line(prov.path, prov.line)
            where = f" at {prov.where()}" + (f" (`{text}`)" if text else "")
        return (
            f"`{expression}`: in-place {op_name} modifies {d.name} {d.shape_text}, which "
            f"{saver} saved for backward{where} ({type(node).__name__}). backward() will fail "
            f"with 'modified by an inplace operation'. Use an out-of-place op "
            f"(e.g. {d.name} = {d.name} + ...) or clone {d.name} before it is used."
        )

    return build
