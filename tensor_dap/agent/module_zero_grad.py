"""``model.zero_grad()`` told to the rules that care (grad-lost: gradients erased before a step).

``optimizer.zero_grad()`` is an event of :mod:`tensor_dap.agent.optimizers`; a module's own
``zero_grad()`` (the tutorials' ``net.zero_grad()``) clears the same ``.grad`` tensors without
any optimizer knowing, so ``loss.backward(); model.zero_grad(); optimizer.step()`` would step
on nothing unseen. ``torch.nn.Module.zero_grad`` is wrapped from the first subscriber on
(:mod:`tensor_dap.agent.method_events`) and tells the subscribers, after it returned, which
module cleared its gradients and from which frame. It runs watched, as before: the ``zero_()``
of a ``zero_grad(set_to_none=False)`` is an op missing-zero-grad sees.
"""

from __future__ import annotations

import sys
import threading
from types import FrameType
from typing import Any, Callable

from tensor_dap.agent.method_events import MethodEvents, Subscription

#: per thread: inside a ``zero_grad()`` call (a module's own that calls ``super()``'s tells once)
_inside = threading.local()


def _wrap_zero_grad(original: Callable[..., Any], events: MethodEvents) -> Callable[..., Any]:
    def zero_grad(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not events.subscribers or getattr(_inside, "active", False):
            return original(self, *args, **kwargs)
        _inside.active = True
        try:
            out = original(self, *args, **kwargs)
        finally:
            _inside.active = False
        events.notify(self, sys._getframe(1))
        return out

    return zero_grad


_EVENTS = MethodEvents("zero_grad", _wrap_zero_grad)


def subscribe(callback: Callable[[Any, FrameType], None]) -> Subscription:
    """``callback(module, caller)`` after a module's ``zero_grad()`` returned, ``caller`` a
    frame below the one that called it (``frames.user_frame`` finds the user's line)."""
    return _EVENTS.subscribe(callback)
