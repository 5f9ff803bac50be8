"""How the trace shows a value, and how it tells cheaply whether a variable changed.

Formatting must never break the traced program: every ``repr`` is guarded (``REPR FAILED``)
and bounded. Tensors are shown from metadata only, as the Variables view shows them
(:func:`tensor_dap.render.tensor.value_line`), so a line costs no device sync unless NaN/Inf flags
were asked for; so are the tensors in a list, tuple or dict (a returned ``(loss, logits)``).

Change detection runs on every traced line, so it avoids ``repr`` and even the tensor summary
when it can: a variable still bound to the same object (and, for tensors, with the same in-place
version counter) is unchanged; only otherwise is the display text computed and compared.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from tensor_dap.render.tensor import value_line

MAX_REPR = 100
MAX_CONTAINER = 200
"""Characters of a list, tuple or dict of tensors: their summaries are longer than numbers."""
_PEEK = 8
"""Items of a container looked at for a tensor (a long list of numbers is not walked)."""
_Tensor = torch.Tensor
_CONTAINERS = (list, dict, set, bytearray)


def safe_repr(value: Any, limit: int = MAX_REPR) -> str:
    """``repr(value)`` on one line, at most ``limit`` characters; never raises."""
    try:
        text = repr(value)
    except Exception:
        return "REPR FAILED"
    if not isinstance(text, str):
        return "REPR FAILED"
    text = text.replace("\n", " ")
    if len(text) > limit:
        keep = (limit - 3) // 2
        text = f"{text[:keep]}...{text[-keep:]}"
    return text


def nan_flags(tensor: Any) -> str:
    """`` nan`` / `` inf`` flags of a floating tensor (reads its data: opt-in only)."""
    try:
        if not (tensor.is_floating_point() or tensor.is_complex()) or tensor.numel() == 0:
            return ""
        with torch.no_grad():
            flags = ""
            if bool(torch.isnan(tensor).any()):
                flags += " nan"
            if bool(torch.isinf(tensor).any()):
                flags += " inf"
            return flags
    except Exception:
        return ""


def show(value: Any, nan: bool = False) -> str:
    """The text shown after ``name =``: a tensor summary, a list/tuple/dict of tensors with
    their summaries (``(tensor<(4,) float32 cpu>, 3)``), or a bounded safe repr."""
    if isinstance(value, _Tensor):
        return _tensor_text(value, nan)
    if type(value) in _SHOWN_CONTAINERS and _holds_tensor(value, 2):
        return _container_text(value, nan, MAX_CONTAINER)
    return safe_repr(value)


def _tensor_text(tensor: Any, nan: bool) -> str:
    text = value_line(tensor)
    if nan:
        flags = nan_flags(tensor)
        if flags:
            text = f"{text[:-1]}{flags}>"
    return text


_SHOWN_CONTAINERS = (list, tuple, dict)


def _items(value: Any) -> list[Any]:
    """The first ``_PEEK`` items of a list or tuple, values of a dict (never raises)."""
    try:
        items = value.values() if type(value) is dict else value
        return [item for _, item in zip(range(_PEEK), items)]
    except Exception:
        return []


def _holds_tensor(value: Any, depth: int) -> bool:
    """Whether one of the first items is a tensor (or, ``depth`` levels down, holds one)."""
    for item in _items(value):
        if isinstance(item, _Tensor):
            return True
        if depth > 1 and type(item) in _SHOWN_CONTAINERS and _holds_tensor(item, depth - 1):
            return True
    return False


def _item_text(item: Any, nan: bool, limit: int) -> str:
    if isinstance(item, _Tensor):
        return _tensor_text(item, nan)
    if type(item) in _SHOWN_CONTAINERS and _holds_tensor(item, 1):
        return _container_text(item, nan, limit)
    return safe_repr(item, min(limit, MAX_REPR))


_BRACKETS: dict[type, str] = {list: "[]", tuple: "()", dict: "{}"}


def _container_text(value: Any, nan: bool, limit: int) -> str:
    """``[a, b, ... 8 more]``: items until ``limit`` characters, then how many are left."""
    is_dict = type(value) is dict
    try:
        count = len(value)
        items = iter(value.items()) if is_dict else ((None, item) for item in value)
        parts: list[str] = []
        used = 2
        for key, item in items:
            text = _item_text(item, nan, limit // 2)
            if is_dict:
                text = f"{safe_repr(key)}: {text}"
            if parts and used + len(text) + 2 > limit:
                parts.append(f"... {count - len(parts)} more")
                break
            parts.append(text)
            used += len(text) + 2
    except Exception:
        return safe_repr(value)
    if count == 1 and not is_dict and type(value) is tuple:
        parts[0] += ","
    brackets = _BRACKETS[type(value)]
    return f"{brackets[0]}{', '.join(parts)}{brackets[1]}"


def extra_key(value: Any) -> Any:
    """What changes when an object is mutated in a way the trace shows, or None.

    Tensors: the version counter (bumped by in-place ops) and the grad flag; containers: the
    length. Anything else is compared by identity alone (a new object is shown, an object
    mutated in place is not).
    """
    if isinstance(value, _Tensor):
        try:
            return (value._version, value.requires_grad)
        except Exception:
            return None
    if isinstance(value, _CONTAINERS):
        try:
            return len(value)
        except Exception:
            return None
    return None


def tensor_meta(tensor: Any) -> Any:
    """What a tensor summary is made of, as a cheap comparable tuple (no text built)."""
    try:
        fn = tensor.grad_fn
        return (tensor.shape, tensor.dtype, tensor.device, tensor.requires_grad, type(fn))
    except Exception:
        return None


def hidden(name: str, value: Any, first: bool) -> bool:
    """Names the trace leaves out: the interpreter's own, always (dunders such as ``__doc__``
    and ``__module__``, a comprehension's hidden ``.0`` argument); and a variable bound to a
    module when first seen (``import torch``)."""
    if name.startswith("__") or not name.isidentifier():
        return True
    return first and isinstance(value, types.ModuleType)
