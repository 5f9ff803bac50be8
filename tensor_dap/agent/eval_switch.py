"""``model.eval()`` told to the rules that care (``graph-kept``).

An evaluation after a long training runs the same call sites as the training (``F.linear`` in
``torch.nn``'s code), which the engine samples one op in 64 by then: a validation loop keeping
its outputs with their graphs (``model.eval()`` without ``torch.no_grad()``) would hardly be
looked at. So the switch to eval mode is an event: ``torch.nn.Module.train`` is wrapped from
the first watch on (``eval()`` calls it), and a module switching from training to eval mode,
at the outermost call (``train()`` recurses into the children), tells the subscribers.

Like ``zero_grad`` (:mod:`tensor_dap.agent.optimizers`), the wrapper stays once installed (with
no subscriber it costs one check per ``train()`` call), and it is hidden from TorchDynamo as
torch's own ``zero_grad`` is.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from typing import Any, Callable, Optional

import torch

log = logging.getLogger("tensor_dap.eval_switch")

_lock = threading.Lock()
#: replaced, never changed in place: read with no lock
_subscribers: tuple[Callable[[], None], ...] = ()
_original_train: Optional[Callable[..., Any]] = None
#: per thread: inside a ``train()`` call (its recursion into the children tells no one)
_inside = threading.local()


class Subscription:
    """``remove()`` unsubscribes."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback

    def remove(self) -> None:
        global _subscribers
        with _lock:
            _subscribers = tuple(c for c in _subscribers if c is not self.callback)


def subscribe(callback: Callable[[], None]) -> Subscription:
    """``callback()`` after a module switched from training to eval mode (installing the
    wrapper the first time)."""
    global _subscribers, _original_train
    with _lock:
        if _original_train is None:
            _original_train = torch.nn.Module.__dict__["train"]
            torch.nn.Module.train = _wrap_train(_original_train)  # type: ignore[method-assign]
        _subscribers = (*_subscribers, callback)
    return Subscription(callback)


def _wrap_train(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def train(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _subscribers or getattr(_inside, "active", False):
            return original(self, *args, **kwargs)
        was_training = self.__dict__.get("training", False)
        _inside.active = True
        try:
            out = original(self, *args, **kwargs)
        finally:
            _inside.active = False
        if was_training and self.__dict__.get("training") is False:
            for callback in _subscribers:
                try:
                    callback()
                except Exception:  # a rule's bug must not break the user's model.eval()
                    log.exception("tensor-dap: an eval-mode subscriber failed")
        return out

    hidden: list[Callable[..., Any]] = []

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        # hidden from dynamo once it is loaded (nothing compiles before): importing it for
        # the first model.eval() would cost the program a second
        if "torch._dynamo" not in sys.modules:
            return train(self, *args, **kwargs)
        if not hidden:
            import torch._dynamo

            hidden.append(torch._dynamo.disable(train))  # type: ignore[no-untyped-call]
        return hidden[0](self, *args, **kwargs)

    wrapper.__tensor_dap_wraps__ = original  # type: ignore[attr-defined]
    return wrapper
