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
nothing were there. The originals come back when the last watch stops (Python shadows; on
Python 3.13+ the first few times) or on :func:`release` (C shadows stay: see :data:`_kept`).
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, Optional

import torch

from tensor_dap.agent import native

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
_stack_length = torch._C._len_torch_function_stack
_stack_at = torch._C._get_function_stack_at
_pop: Callable[[], Any] = torch._C._pop_torch_function_stack
_push = torch._C._push_on_torch_function_stack

#: operands the fast path takes (``self`` and the last argument: ``other``, or ``self`` for
#: ``-a``). Anything else — a subclass, a custom object with ``__radd__`` — goes the original
#: way, where torch may answer NotImplemented without any op (and so without any rule) running,
#: and where a subclass's ``__torch_function__`` is kept out of the engine's own reads.
PLAIN = frozenset([torch.Tensor, torch.nn.Parameter, int, float, bool, complex])

_lock = threading.Lock()
_users = 0
#: the shadows are C and stay installed when the last watch stops. Each install and removal
#: modifies ``torch.Tensor`` (15 attributes), and from Python 3.13 a class modified about a
#: thousand times stops getting type versions: its attribute lookups are never cached again.
#: A program starting many watches (``@tensor_dap.snoop`` on a function called in a loop)
#: would leave every tensor attribute lookup slower for good. With no watch running a C shadow
#: calls the original at once (~1% of a scalar op); a Python one costs a Python frame per
#: operator (~65% of a scalar op), so Python shadows are removed with the last watch — on
#: Python 3.13+ only the first ``_PYTHON_REINSTALLS`` times (each install and removal spends
#: about 30 of the ~1000): a program that starts more watches than that keeps them.
_kept = False
_PYTHON_REINSTALLS: Optional[int] = 16 if sys.version_info >= (3, 13) else None
#: installs since the last release()
_installs = 0
#: operator name -> (what ``torch.Tensor.__dict__`` held before, ``_MISSING``: inherited; ours)
_saved: dict[str, tuple[Any, Any]] = {}
#: thread id -> the watch mode that thread pushed (to put back one an interrupt knocked off)
_pushed: dict[int, Any] = {}


def _shadow(
    name: str, original: Callable[..., Any], op: Callable[..., Any], modes: tuple[type, ...]
) -> Callable[..., Any]:
    """The stand-in for one operator: ``original`` is called, ``op`` is what the rules see.

    In C when the engine's C path runs (``_fastpath.Shadow``: the same steps, without the
    Python frame and the interrupt handling it needs), else :func:`_python_shadow`.
    """
    fastpath = native.fastpath
    if native.enabled and fastpath is not None:
        shadow: Callable[..., Any] = fastpath.Shadow(name, original, op, modes)
        return shadow
    return _python_shadow(name, original, op, modes)


def _python_shadow(
    name: str, original: Callable[..., Any], op: Callable[..., Any], modes: tuple[type, ...]
) -> Callable[..., Any]:
    def operator(*args: Any, **kwargs: Any) -> Any:
        if _mode_enabled():  # a mode is on the stack and torch functions are not disabled
            mode: Any = None
            try:
                mode = _pop()
                if (
                    mode.__class__ in modes
                    and args[-1].__class__ in PLAIN
                    and args[0].__class__ in PLAIN
                ):
                    # (a watch mode: mypy narrows it to ``object`` by the class test above)
                    return mode.run(mode, op, original, args, kwargs or None, _getframe(1))  # type: ignore[attr-defined]
            finally:
                if mode is not None:
                    _push(mode)
                else:  # an exception (Ctrl-C) landed as the pop returned
                    _restore_lost_mode()
        return original(*args, **kwargs)

    operator.__name__ = name
    # pickle finds it again as torch.Tensor.<name> (whatever that is when it loads)
    operator.__qualname__ = f"Tensor.{name}"
    operator.__module__ = "torch"
    operator.__doc__ = original.__doc__
    return operator


#: the code of every Python shadow: a frame of it is not the user's (the mode steps over it)
SHADOW_CODE = _python_shadow("__add__", _Tensor.__add__, _Tensor.add, ()).__code__


def track(mode: Any) -> None:
    """``mode`` is the watch mode the calling thread just pushed."""
    _pushed[threading.get_ident()] = mode


def untrack(watch: Any) -> None:
    """Forget the modes of a watch that stopped (every thread's: they hold on to the watch)."""
    for ident, mode in list(_pushed.items()):
        if mode.watch is watch:
            _pushed.pop(ident, None)


def _restore_lost_mode() -> None:
    """Put this thread's watch mode back if the pop that lost it was the fast path's own."""
    mode = _pushed.get(threading.get_ident())
    stack = [_stack_at(i) for i in range(_stack_length())]
    if mode is not None and mode.watch._mode is not None and mode not in stack:
        _push(mode)


def remove_mode(mode: Any) -> bool:
    """Take ``mode`` off this thread's stack wherever it is, leaving the modes above it in place
    (``TorchFunctionMode.__exit__`` pops whatever is on top). False if it is not there."""
    above = []
    try:
        while _stack_length():
            top = _pop()
            if top is mode:
                return True
            above.append(top)
        return False
    finally:
        for other in reversed(above):
            _push(other)


def install(modes: tuple[type, ...]) -> None:
    """Shadow the operators (counted: nested or concurrent watches install once; C shadows
    installed by an earlier watch are still there)."""
    global _users, _kept, _installs
    with _lock:
        _users += 1
        if _saved:
            return
        _installs += 1
        # torch caches these tables of Tensor's methods the first time they are asked for:
        # filled now, they hold the originals, and the shadows are added beside them
        # (``resolve_name(torch.Tensor.__add__)`` still answers while a shadow is there)
        names = torch.overrides._get_overridable_functions()[1]
        methods = torch.overrides._get_tensor_methods()
        _kept = native.enabled or (
            _PYTHON_REINSTALLS is not None and _installs >= _PYTHON_REINSTALLS
        )
        for name, op in OPERATORS.items():
            before = _Tensor.__dict__.get(name, _MISSING)
            original = getattr(_Tensor, name)
            shadow = _shadow(name, original, getattr(torch._C.TensorBase, op), modes)
            _saved[name] = (before, shadow)
            setattr(_Tensor, name, shadow)
            names[shadow] = f"torch.Tensor.{name}"
            methods.add(shadow)


def uninstall() -> None:
    """A watch no longer needs the operators: Python shadows go once no watch does; C shadows
    stay (see :data:`_kept`)."""
    global _users
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if not _users and not _kept:
            _restore()


def release() -> bool:
    """Give the operators back now if no watch runs (a name someone else has set since is left
    as they set it); whether they were given back."""
    global _installs
    with _lock:
        if _users:
            return False
        _restore()
        _installs = 0
        return True


def _restore() -> None:
    names = torch.overrides._get_overridable_functions()[1]
    methods = torch.overrides._get_tensor_methods()
    for name, (before, shadow) in _saved.items():
        names.pop(shadow, None)
        methods.discard(shadow)
        if _Tensor.__dict__.get(name) is not shadow:
            continue
        if before is _MISSING:
            delattr(_Tensor, name)
        else:
            setattr(_Tensor, name, before)
    _saved.clear()
