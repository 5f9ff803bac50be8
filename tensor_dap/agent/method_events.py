"""Events of torch methods the rules hear about (``model.eval()``, ``model.zero_grad()``,
``GradScaler.unscale_``): one method of a torch class wrapped in place the first time a rule
subscribes.

The wrapper stays once installed (with no subscriber it costs one check per call): from Python
3.13 a class modified about a thousand times — and each of its subclasses, every module — stops
getting type versions, so a program starting a watch per call would slow attribute lookups on
its modules for good. It is hidden from TorchDynamo as torch's own ``zero_grad`` is. A
subscriber that raises is logged and never reaches the program.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from typing import Any, Callable, Optional

import torch

log = logging.getLogger("tensor_dap.method_events")


class Subscription:
    """``remove()`` unsubscribes."""

    def __init__(self, events: MethodEvents, callback: Callable[..., None]) -> None:
        self.events = events
        self.callback = callback

    def remove(self) -> None:
        self.events.unsubscribe(self.callback)


class MethodEvents:
    """The subscribers to ``<owner>.<name>`` (``torch.nn.Module`` unless told);
    ``wrap(original, events)`` makes the method that calls ``original`` and :meth:`notify`
    (installed by the first subscriber)."""

    def __init__(
        self,
        name: str,
        wrap: Callable[[Callable[..., Any], MethodEvents], Callable[..., Any]],
        owner: type = torch.nn.Module,
    ) -> None:
        self.name = name
        self.owner = owner
        self._wrap = wrap
        self._lock = threading.Lock()
        #: replaced, never changed in place: read with no lock
        self.subscribers: tuple[Callable[..., None], ...] = ()
        self.original: Optional[Callable[..., Any]] = None

    def subscribe(self, callback: Callable[..., None]) -> Subscription:
        with self._lock:
            if self.original is None:
                self.original = self.owner.__dict__[self.name]
                method = dynamo_hidden(self._wrap(self.original, self), self.original)
                setattr(self.owner, self.name, method)
            self.subscribers = (*self.subscribers, callback)
        return Subscription(self, callback)

    def unsubscribe(self, callback: Callable[..., None]) -> None:
        with self._lock:
            self.subscribers = tuple(c for c in self.subscribers if c is not callback)

    def notify(self, *args: Any) -> None:
        for callback in self.subscribers:
            try:
                callback(*args)
            except Exception:  # a rule's bug must not break the user's call
                log.exception(
                    "tensor-dap: a subscriber to %s.%s failed", self.owner.__name__, self.name
                )


def dynamo_hidden(method: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    """``method``, which wraps ``original``, hidden from TorchDynamo as torch's own
    ``zero_grad`` is, and marked as wrapping ``original``."""
    hidden: list[Callable[..., Any]] = []

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        # hidden from dynamo once it is loaded (nothing compiles before): importing it for
        # the first model.eval() would cost the program a second
        if "torch._dynamo" not in sys.modules:
            return method(self, *args, **kwargs)
        if not hidden:
            import torch._dynamo

            hidden.append(torch._dynamo.disable(method))  # type: ignore[no-untyped-call]
        return hidden[0](self, *args, **kwargs)

    wrapper.__tensor_dap_wraps__ = original  # type: ignore[attr-defined]
    return wrapper
