"""``model.eval()`` told to the rules that care (``graph-kept``).

An evaluation after a long training runs the same call sites as the training (``F.linear`` in
``torch.nn``'s code), which the engine samples one op in 64 by then: a validation loop keeping
its outputs with their graphs (``model.eval()`` without ``torch.no_grad()``) would hardly be
looked at. So the switch to eval mode is an event: ``torch.nn.Module.train`` is wrapped from
the first subscriber on (``eval()`` calls it; :mod:`tensor_dap.agent.method_events`), and a
module switching from training to eval mode, at the outermost call (``train()`` recurses into
the children), tells the subscribers.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from tensor_dap.agent.method_events import MethodEvents, Subscription

#: per thread: inside a ``train()`` call (its recursion into the children tells no one)
_inside = threading.local()


def _wrap_train(original: Callable[..., Any], events: MethodEvents) -> Callable[..., Any]:
    def train(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not events.subscribers or getattr(_inside, "active", False):
            return original(self, *args, **kwargs)
        was_training = self.__dict__.get("training", False)
        _inside.active = True
        try:
            out = original(self, *args, **kwargs)
        finally:
            _inside.active = False
        if was_training and self.__dict__.get("training") is False:
            events.notify()
        return out

    return train


_EVENTS = MethodEvents("train", _wrap_train)


def subscribe(callback: Callable[[], None]) -> Subscription:
    """``callback()`` after a module switched from training to eval mode."""
    return _EVENTS.subscribe(callback)
