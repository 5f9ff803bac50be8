"""A ``GradScaler`` that found no gradient to unscale, told to the rules (grad-lost).

With AMP, ``scaler.step(optimizer)`` unscales the optimizer's gradients before it steps, and when
none of its parameters has a gradient (``zero_grad()`` ran between ``backward()`` and the step)
it raises ``AssertionError: No inf checks were recorded for this optimizer.`` before
``optimizer.step()`` — and so before the optimizer's step hooks, where grad-lost looks for
erased gradients. ``torch.amp.GradScaler.unscale_`` (which ``step`` calls, and
``torch.cuda.amp.GradScaler`` inherits) is wrapped from the first subscriber on
(:mod:`tensor_dap.agent.method_events`): when it returns having recorded no check for the
optimizer, the subscribers hear ``(optimizer, caller)`` first, so the program's assertion comes
with the line that erased the gradients.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any, Callable

import torch

from tensor_dap.agent.method_events import MethodEvents, Subscription


def _wrap_unscale(original: Callable[..., Any], events: MethodEvents) -> Callable[..., Any]:
    def unscale_(self: Any, optimizer: Any) -> Any:
        out = original(self, optimizer)
        if events.subscribers and not _checks_recorded(self, optimizer):
            events.notify(optimizer, sys._getframe(1))
        return out

    return unscale_


def _checks_recorded(scaler: Any, optimizer: Any) -> bool:
    """Whether ``unscale_`` recorded an inf check for ``optimizer`` (it does for each device
    its gradients are on); True when the scaler is disabled or its internals are not known."""
    try:
        if not scaler.is_enabled():
            return True
        state = scaler._per_optimizer_states[id(optimizer)]
        return len(state["found_inf_per_device"]) > 0
    except Exception:
        return True


_EVENTS = MethodEvents("unscale_", _wrap_unscale, owner=torch.amp.GradScaler)


def subscribe(callback: Callable[[Any, FrameType], None]) -> Subscription:
    """``callback(optimizer, caller)`` when a scaler's ``unscale_`` found no gradient of
    ``optimizer`` (its ``step`` is about to raise)."""
    return _EVENTS.subscribe(callback)
