"""What an autograd graph node saved for backward, as Python sees it.

Each node type exposes the tensors it saved as ``_saved_<name>`` attributes (sizes and strides
too, as ``_saved_<name>_sym_sizes``); ``inplace-saved`` looks for the tensor a write would
invalidate among them, ``nan-inf`` checks they were finite. The names are read once per node
type: ``dir()`` of a node costs tens of microseconds.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

_SAVED_ATTRS: dict[type, tuple[str, ...]] = {}


#: what a custom ``autograd.Function``'s node (its ``ctx``) saved with ``save_for_backward``
_FUNCTION_SAVED = "saved_tensors"


def saved_attribute_names(node: Any) -> tuple[str, ...]:
    """The ``_saved_*`` attributes of ``node``'s type that may hold tensors (a custom
    ``autograd.Function``'s: ``saved_tensors``)."""
    kind = type(node)
    names = _SAVED_ATTRS.get(kind)
    if names is None:
        if issubclass(kind, torch.autograd.function.BackwardCFunction):
            names = (_FUNCTION_SAVED,)
        else:
            names = tuple(
                n
                for n in dir(node)
                if n.startswith("_saved_") and not n.endswith(("_sym_sizes", "_sym_strides"))
            )
        _SAVED_ATTRS[kind] = names
    return names


#: what :func:`saved_value` gives for a saved tensor that a saved-tensor hook packed
PACKED: Any = object()


def saved_value(node: Any, attr: str) -> Any:
    """``node.<attr>`` (a ``_saved_*`` attribute), or :data:`PACKED` when a saved-tensor hook
    packed what it saved. Reading such an attribute unpacks it, running the program's hook:
    ``torch.utils.checkpoint`` recomputes the checkpointed forward (every read: a transformer
    trained with checkpointing ran its attention 15× over under check), ``save_on_cpu`` copies
    the tensor back to the device. The program unpacks it once, in backward; the engine never
    does. Raises what reading the attribute raises (freed by backward...)."""
    # (_saved_self -> _raw_saved_self, saved_tensors -> _raw_saved_tensors: not unpacked)
    raw = getattr(node, "_raw_" + attr if attr == _FUNCTION_SAVED else "_raw" + attr, None)
    if raw is not None:
        for item in raw if isinstance(raw, (list, tuple)) else (raw,):
            if getattr(item, "unpack_hook", None) is not None:
                return PACKED
    return getattr(node, attr)


def saved_tensors(node: Any) -> Iterator[Any]:
    """The tensors ``node`` saved for backward and still holds (none once backward freed them,
    none that a saved-tensor hook packed: :func:`saved_value`)."""
    for attr in saved_attribute_names(node):
        try:
            value = saved_value(node, attr)
        except Exception:  # freed by backward(), or modified in place since
            continue
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, torch.Tensor):
                yield item


def is_parameter(tensor: Any) -> bool:
    """A leaf that requires grad (or a view of one): a model holds it anyway."""
    base = tensor._base if tensor._base is not None else tensor
    return bool(base.is_leaf and base.requires_grad)


def freed_by_backward(node: Any, limit: int = 16) -> bool:
    """Whether a ``backward()`` already ran through ``node`` (without ``retain_graph``): the
    first tensor saved for backward met, breadth first from ``node``, was freed. A backward
    started from a tensor made of this one (``(loss * 0.5).backward()``,
    ``scaler.scale(loss).backward()``) frees it as well as one started from it."""
    queue = [node]
    seen = 0
    while queue and seen < limit:
        current = queue.pop(0)
        seen += 1
        for attr in saved_attribute_names(current):
            try:
                value = saved_value(current, attr)
            except RuntimeError as error:  # "... saved tensors after they have been freed"
                if "freed" in str(error):
                    return True
                continue
            except Exception:
                continue
            if isinstance(value, torch.Tensor):
                return False
        queue.extend(n for n, _ in current.next_functions if n is not None)
    return False


def accumulates_grad(node: Any) -> bool:
    """An ``AccumulateGrad`` node: a leaf tensor's (a parameter's), which every graph using it
    shares and which computes no gradient (a custom ``Function``'s context may have a
    ``variable`` too: the type says)."""
    return type(node).__name__ == "AccumulateGrad"


def graph_node(tensor: Any) -> Any:
    """``tensor.grad_fn``, or None where reading it raises: the result of an in-place op on a
    view made under ``no_grad`` (``with torch.no_grad(): weight[pad].fill_(0)``, as
    ``nn.Embedding(padding_idx=...)`` initialises itself), which PyTorch forbids using with
    grad mode on — the program's own next use of it raises, not the watch's look at it."""
    try:
        return tensor.grad_fn
    except RuntimeError:
        return None
