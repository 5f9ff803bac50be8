"""Optimizers run their own tensor code outside the watch, and tell the rules what they did.

``optimizer.step()`` and ``optimizer.zero_grad()`` are library code: none of their ops can trip
a rule about the user's code, and the rules that care about optimizers (missing-zero-grad,
grad-lost's unused parameters) look at the optimizer itself. Yet every op and every ``p.grad``
read in them would pay the watch mode's dispatch: some 40 per step of a 4-parameter model,
several % of an MLP training step. So:

- ``step()``: torch's global step pre-hook takes the calling thread's watch modes off the
  torch-function stack (not for ``step(closure)``: the closure is the user's code), runs the
  rules' pre-step checks, and the post-hook runs their post-step bookkeeping and puts the
  modes back. A step that raises skips the post-hook: the next
  ``step()``, ``zero_grad()`` or the end of the watch puts them back (:func:`resume`).
- ``zero_grad()``: ``torch.optim.Optimizer.zero_grad`` is wrapped from the first watch on; the
  wrapper runs the original with the modes off (``try``/``finally``) and then tells the rules
  which gradients it zeroed. An optimizer class with a ``zero_grad`` of its own runs it watched,
  as before.
- construction: ``torch.optim.Optimizer.__init__`` (which every optimizer's own ``__init__``
  calls) is wrapped the same way, kept and given back with ``zero_grad``; after it returns the
  subscribers hear of the new optimizer and the frame that made it (the optimizer-remade rule).

Rules subscribe here (:func:`subscribe`) rather than registering torch hooks of their own, so
that their parameter reads run with the modes off too.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Optional

import torch

log = logging.getLogger("tensor_dap.optimizers")

_stack_length = torch._C._len_torch_function_stack
_stack_at = torch._C._get_function_stack_at
_pop = torch._C._pop_torch_function_stack
_push = torch._C._push_on_torch_function_stack


@dataclass(eq=False)
class Subscriber:
    """What a rule wants to hear (each may be None); ``remove()`` unsubscribes.

    - ``before_step(optimizer, caller)``: before ``step()`` runs; ``caller`` is the frame that
      called ``step()`` (torch's wrapper of it), to find the user's line from;
    - ``after_step(optimizer)``: after ``step()`` returned;
    - ``zeroed(optimizer)``: after ``zero_grad()`` returned;
    - ``zeroing(optimizer)``: before ``zero_grad()`` runs (what it is about to erase);
    - ``made(optimizer, caller)``: after ``torch.optim.Optimizer.__init__`` returned; ``caller``
      is the frame that called it (the optimizer class's ``__init__``).
    """

    before_step: Optional[Callable[[Any, FrameType], None]] = None
    after_step: Optional[Callable[[Any], None]] = None
    zeroed: Optional[Callable[[Any], None]] = None
    made: Optional[Callable[[Any, FrameType], None]] = None
    zeroing: Optional[Callable[[Any], None]] = None

    def remove(self) -> None:
        global _subscribers
        with _lock:
            if self in _subscribers:
                _subscribers = tuple(s for s in _subscribers if s is not self)
                _index_callbacks()


_lock = threading.Lock()
#: replaced, never changed in place: :func:`_notify` reads it with no lock and no copy
_subscribers: tuple[Subscriber, ...] = ()
#: kind -> the subscribers' callbacks for it, in order (rebuilt from _subscribers)
_callbacks: dict[str, tuple[Callable[..., None], ...]] = {}
#: the watch mode types to step aside from (set by the first install)
_modes: tuple[type, ...] = ()
_users = 0
_hook_handles: list[Any] = []
#: the ``zero_grad`` torch.optim.Optimizer had before ours, while ours is installed. Ours
#: stays after the last watch (with none running it calls the original after one check), as
#: the operator shadows do: from Python 3.13 a class modified about a thousand times — and each
#: of its subclasses, every optimizer — stops getting type versions, so a program starting a
#: watch per call would slow attribute lookups on its optimizers for good. :func:`release`
#: gives it back.
_original_zero_grad: Optional[Callable[..., Any]] = None
#: the same for ``torch.optim.Optimizer.__init__``
_original_init: Optional[Callable[..., Any]] = None
#: per thread: (the modes popped for a step that has not ended yet, the stack depth they
#: were popped at)
_aside = threading.local()


def subscribe(subscriber: Subscriber) -> Subscriber:
    global _subscribers
    with _lock:
        _subscribers = (*_subscribers, subscriber)
        _index_callbacks()
    return subscriber


def _index_callbacks() -> None:
    global _callbacks
    _callbacks = {
        kind: tuple(
            callback
            for subscriber in _subscribers
            if (callback := getattr(subscriber, kind)) is not None
        )
        for kind in ("before_step", "after_step", "zeroed", "made", "zeroing")
    }


def _step_aside() -> list[Any]:
    """Pop this thread's watch modes from the top of its stack (a user's mode above them
    leaves everything in place); the modes popped, innermost first."""
    popped = []
    try:
        while _stack_length() and isinstance(_stack_at(_stack_length() - 1), _modes):
            popped.append(_pop())
    except Exception:
        log.exception("tensor-dap: could not step aside for an optimizer")
    return popped


def _push_back(popped: list[Any]) -> None:
    for mode in reversed(popped):
        if mode.watch._mode is not None:  # a watch that stopped meanwhile stays off
            _push(mode)


def resume() -> None:
    """Put back the modes a step of this thread took off, if its post-hook never ran.

    They go back where they were: a mode the program entered since (after a failed step it
    caught) stays above them, so that its own exit pops it and not the watch's.
    """
    aside = getattr(_aside, "popped", None)
    if aside:
        _aside.popped = None
        popped, depth = aside
        above = []
        while _stack_length() > depth:
            above.append(_pop())
        _push_back(popped)
        for mode in reversed(above):
            _push(mode)


def _notify(kind: str, *args: Any) -> None:
    for callback in _callbacks.get(kind, ()):
        try:
            callback(*args)
        except Exception:  # a rule's bug must not break the user's step
            log.exception("tensor-dap: an optimizer subscriber failed")


def _has_closure(args: Any, kwargs: Any) -> bool:
    """``step(closure)`` (LBFGS...) runs the user's forward and backward inside the step."""
    closure = args[1] if len(args) > 1 else (kwargs or {}).get("closure")
    return closure is not None


def _pre_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    resume()
    # (args holds the optimizer first; a step with a closure stays watched: the closure is
    # the user's code)
    closure = _has_closure(args, kwargs)
    popped = [] if closure else _step_aside()
    _aside.popped = (popped, _stack_length()) if popped else None
    _aside.closure = closure
    _notify("before_step", optimizer, sys._getframe(1))


def _post_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    _notify("after_step", optimizer)
    _aside.closure = False
    resume()


def closure_step() -> bool:
    """Whether the step this thread runs called a closure (``step(closure)``): what an
    ``after_step`` subscriber asks, the closure's backward() calls having run in the step."""
    return bool(getattr(_aside, "closure", False))


def _wrap_zero_grad(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` run with the modes off, then the subscribers told.

    torch's own is ``torch._disable_dynamo(impl)``: ours wraps ``impl`` and is disabled the
    same way, so a call pays one dynamo layer as before and ``torch.compile`` runs it as it is
    rather than tracing the stack calls.
    """
    disable = getattr(torch, "_disable_dynamo", None)
    impl = original
    if disable is not None and getattr(original, "__code__", None) is _dynamo_disabled_code():
        impl = original.__wrapped__  # type: ignore[attr-defined]

    # (updated=(): impl's __dict__ may hold torch's cached disabled impl, which would be
    # called in place of this wrapper)
    @functools.wraps(impl, updated=())
    def zero_grad(self: Any, *args: Any, **kwargs: Any) -> Any:
        resume()
        popped = _step_aside()
        try:
            if _callbacks.get("zeroing"):
                _notify("zeroing", self)
            out = impl(self, *args, **kwargs)
            _notify("zeroed", self)  # (with the modes off: its p.grad reads are not dispatched)
        finally:
            _push_back(popped)
        return out

    wrapper = disable(zero_grad) if disable is not None else zero_grad
    wrapper.__tensor_dap_wraps__ = original  # type: ignore[union-attr]
    return wrapper


def _wrap_init(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (run watched, as before: building param groups is the program's code),
    then the subscribers told of the new optimizer when one listens."""

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if _callbacks.get("made"):
            _notify("made", self, sys._getframe(1))

    __init__.__tensor_dap_wraps__ = original  # type: ignore[attr-defined]
    return __init__


def _dynamo_disabled_code() -> Any:
    """The code of the functions ``torch._disable_dynamo`` returns."""
    return torch._disable_dynamo(_dynamo_disabled_code).__code__  # type: ignore[attr-defined]


def install(modes: tuple[type, ...]) -> None:
    """Step aside from ``modes`` in optimizers (counted: nested or concurrent watches install
    once)."""
    global _users, _modes, _original_zero_grad, _original_init
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    with _lock:
        _users += 1
        if _users > 1:
            return
        _modes = modes
        _hook_handles.append(register_optimizer_step_pre_hook(_pre_step))
        _hook_handles.append(register_optimizer_step_post_hook(_post_step))
        if _original_zero_grad is None:
            _original_zero_grad = torch.optim.Optimizer.__dict__["zero_grad"]
            torch.optim.Optimizer.zero_grad = _wrap_zero_grad(  # type: ignore[method-assign]
                _original_zero_grad
            )
        if _original_init is None:
            _original_init = torch.optim.Optimizer.__dict__["__init__"]
            torch.optim.Optimizer.__init__ = _wrap_init(_original_init)  # type: ignore[method-assign]


def uninstall() -> None:
    """A watch stopped: this thread's modes come back from a step that raised, and the last
    watch to stop removes the step hooks (``zero_grad`` stays: see _original_zero_grad)."""
    global _users
    resume()
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if _users:
            return
        for handle in _hook_handles:
            handle.remove()
        _hook_handles.clear()


def release() -> bool:
    """Give ``zero_grad`` and ``__init__`` back now if no watch runs (unless someone set another
    since); whether no watch ran."""
    global _original_zero_grad, _original_init
    with _lock:
        if _users:
            return False
        for name, original in (("zero_grad", _original_zero_grad), ("__init__", _original_init)):
            ours = torch.optim.Optimizer.__dict__.get(name)
            if original is not None and getattr(ours, "__tensor_dap_wraps__", None) is original:
                setattr(torch.optim.Optimizer, name, original)
        _original_zero_grad = _original_init = None
        return True
