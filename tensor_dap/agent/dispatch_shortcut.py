"""A shortcut past torch's Python dispatch to the watch's mode: ``F.relu(x)``, ``loss.backward()``.

The functions torch writes in Python (most of ``torch.nn.functional``, ``Tensor.backward``,
``torch.autograd.grad``, ``torch.split``...) check ``has_torch_function`` and, with any mode on
the stack, hand themselves to ``torch.overrides.handle_torch_function``: a Python function that
collects the overloaded arguments, pops the mode in a context manager, calls its
``__torch_function__`` and pushes the mode back — about fifteen Python calls, 2 µs in a tight
loop and several times that between a training step's large kernels. A training step makes a
few such calls (``F.relu``, ``F.cross_entropy``, ``loss.backward()``): the mode's own cost.

While a watch runs, the torch modules whose functions make those calls hold
``_fastpath.Dispatch`` under that name instead (:data:`MODULES`, looked up by the functions at
each call). When the innermost mode is a watch's and every relevant argument is ``None``, a
plain tensor, a parameter or a number, it does what torch's does, in C: pops the mode, runs
the engine's per-op path with what torch would have handed the mode (the function, the
overloaded types, the arguments; the caller is the frame that called the function) and
pushes it back. Anything else — another mode on top, a tensor subclass, torch functions
disabled, another thread with no watch — calls torch's own. The originals come back when the
last watch stops. In the Python engine (no C path built) nothing is replaced.

``torch.compile`` is unaffected: compiled code runs with the watch's mode off the stack
(:mod:`compile_guard`), where ``has_torch_function`` is false and neither is reached.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

import torch

from tensor_dap.agent import native

#: the torch modules whose Python functions hand themselves to ``handle_torch_function`` in a
#: training program's steps (functional ops, ``Tensor``'s Python methods, ``autograd.grad``,
#: ``torch.split``/``einsum``...)
MODULES = ("torch.nn.functional", "torch._tensor", "torch.autograd", "torch.functional")
_NAME = "handle_torch_function"

_lock = threading.Lock()
_users = 0
#: module -> our stand-in, for the modules it was put in
_installed: dict[Any, Any] = {}


def _declined(public_api: Any, types: tuple[type, ...], args: tuple[Any, ...], kwargs: Any) -> Any:
    """What ``handle_torch_function`` does once the mode answered NotImplemented, for the
    plain arguments the stand-in takes: ``torch.Tensor``'s own ``__torch_function__`` when a
    plain tensor is among them, else (or when it declines too) torch's error."""
    if types:
        result = torch.Tensor.__torch_function__(public_api, types, args, kwargs)  # type: ignore[no-untyped-call]
        if result is not NotImplemented:
            return result
    message = (
        f"no implementation found for '{public_api.__module__}.{public_api.__name__}' on types "
        f"that implement __torch_function__: {list(types)}"
    )
    if torch._C._is_torch_function_mode_enabled():
        mode = torch.overrides._get_current_function_mode()  # type: ignore[no-untyped-call]
        message += f" nor in mode {mode}"
    raise TypeError(message)


def install(modes: tuple[type, ...]) -> None:
    """Put the stand-in in :data:`MODULES` (counted: nested or concurrent watches install
    once)."""
    global _users
    fastpath = native.fastpath
    with _lock:
        _users += 1
        if _installed or not native.enabled or fastpath is None:
            return
        original = torch.overrides.handle_torch_function
        enabled = torch._C._is_torch_function_enabled
        stand_in = fastpath.Dispatch(original, modes, _declined, enabled)
        for name in MODULES:
            module = importlib.import_module(name)
            if module.__dict__.get(_NAME) is original:
                setattr(module, _NAME, stand_in)
                _installed[module] = stand_in


def uninstall() -> None:
    """A watch stopped: the last one gives torch's function back (where nobody has set
    another since)."""
    global _users
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if _users:
            return
        for module, stand_in in _installed.items():
            if module.__dict__.get(_NAME) is stand_in:
                setattr(module, _NAME, torch.overrides.handle_torch_function)
        _installed.clear()
