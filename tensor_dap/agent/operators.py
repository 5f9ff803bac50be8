"""The fast path for Tensor's operators: ``a * b``, ``a + b``, ``a < b``, ``-a``, ``t += 1``.

Through a ``TorchFunctionMode`` every op costs about as much again as the op itself when tensors
are small: torch packs the arguments, calls Python, and parses them a second time when the mode
calls the function. In a loop of scalar-sized ops that alone doubles the run time before any rule
runs. Operators are most of those ops, and they are Python-visible slots of ``torch.Tensor``.

So while a watch runs, each operator below is shadowed on ``torch.Tensor`` by a small Python
function. When the calling thread's innermost torch-function mode is a watch's, it takes that
mode off the stack, runs the very per-op path the mode runs (same plan, same rules, same
provenance; the op itself is called with no mode dispatch at all) and puts the mode back.
Otherwise — another thread, torch functions disabled (tensor-dap's own reads), an op inside an
op the mode is already handling, a user's mode on top — it calls the original operator as if
nothing were there. The originals come back when the last watch stops.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable

import torch

#: operator -> the function a mode receives for it, which is what the rules see on either path
#: (same plans, names and findings). Only operators implemented in C, for which torch hands
#: modes that function, never the operator itself: a mode or subclass comparing ``func`` with
#: ``torch.Tensor.sub`` is unaffected. (Indexing is left out for that reason: torch hands modes
#: whatever ``torch.Tensor.__getitem__`` is at the time.)
OPERATORS = {
    "__add__": "add",
    "__radd__": "add",
    "__sub__": "sub",
    "__mul__": "mul",
    "__rmul__": "mul",
    "__truediv__": "div",
    "__matmul__": "matmul",
    "__neg__": "neg",
    "__lt__": "lt",
    "__le__": "le",
    "__gt__": "gt",
    "__ge__": "ge",
    "__iadd__": "add_",
    "__isub__": "sub_",
    "__imul__": "mul_",
}

_Tensor = torch.Tensor
_MISSING = object()
_getframe = sys._getframe
_mode_enabled = torch._C._is_torch_function_mode_enabled
_pop = torch._C._pop_torch_function_stack
_push = torch._C._push_on_torch_function_stack

_lock = threading.Lock()
_users = 0
#: operator name -> what ``torch.Tensor.__dict__`` held before (``_MISSING``: inherited)
_saved: dict[str, Any] = {}


def _shadow(
    original: Callable[..., Any], op: Callable[..., Any], modes: tuple[type, ...]
) -> Callable[..., Any]:
    """The stand-in for one operator: ``original`` is called, ``op`` is what the rules see."""

    def operator(*args: Any) -> Any:
        if _mode_enabled():  # a mode is on the stack and torch functions are not disabled
            mode = _pop()
            try:
                if mode.__class__ in modes:
                    return mode.handle(op, original, args, None, _getframe(1))
            finally:
                _push(mode)
        return original(*args)

    operator.__name__ = operator.__qualname__ = original.__name__
    operator.__doc__ = original.__doc__
    operator.__module__ = __name__
    return operator


def install(modes: tuple[type, ...]) -> None:
    """Shadow the operators (counted: nested or concurrent watches install once)."""
    global _users
    with _lock:
        _users += 1
        if _users > 1:
            return
        for name, op in OPERATORS.items():
            _saved[name] = _Tensor.__dict__.get(name, _MISSING)
            original = getattr(_Tensor, name)
            setattr(_Tensor, name, _shadow(original, getattr(torch._C.TensorBase, op), modes))


def uninstall() -> None:
    """Give the operators back once no watch needs them."""
    global _users
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if _users:
            return
        for name, before in _saved.items():
            if before is _MISSING:
                delattr(_Tensor, name)
            else:
                setattr(_Tensor, name, before)
        _saved.clear()


def installed() -> bool:
    return _users > 0
