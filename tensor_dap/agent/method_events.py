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

from tensor_dap.agent import frames

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
                # (the original under a name of its own: see dynamo_hidden)
                alias = f"_tensor_dap_original_{self.name}"
                setattr(self.owner, alias, self.original)
                method = dynamo_hidden(self._wrap(self.original, self), self.original, self, alias)
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


#: the wrapper's first lines, compiled from text so that its code is in no file of this package:
#: TorchDynamo skips this package's files (:mod:`tensor_dap.agent.compile_guard`), and would
#: refuse ``fullgraph=True`` for a function calling ``model.zero_grad()`` after a watch ended
_PASS_THROUGH = """
def wrapper(self, *args, **kwargs):
    if not events.subscribers or is_compiling():
        return getattr(self, alias)(*args, **kwargs)
    return listened(self, *args, **kwargs)
"""
#: (torch.compiler.is_compiling from torch 2.3; TorchDynamo answers it while it traces)
_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


def dynamo_hidden(
    method: Callable[..., Any], original: Callable[..., Any], events: MethodEvents, alias: str
) -> Callable[..., Any]:
    """``method``, which wraps ``original``, hidden from TorchDynamo as torch's own
    ``zero_grad`` is, and marked as wrapping ``original``. While no watch listens to
    ``events``, or while TorchDynamo traces it (a compiled region is not watched), it calls
    ``original`` as the method ``alias`` of the object, from code TorchDynamo traces as it
    traces the method itself (``original`` called by itself is a function TorchDynamo refuses
    to trace)."""
    hidden: list[Callable[..., Any]] = []

    def listened(self: Any, *args: Any, **kwargs: Any) -> Any:
        # hidden from dynamo once it is loaded (nothing compiles before): importing it for
        # the first model.eval() would cost the program a second
        if "torch._dynamo" not in sys.modules:
            return method(self, *args, **kwargs)
        if not hidden:
            import torch._dynamo

            hidden.append(torch._dynamo.disable(method))  # type: ignore[no-untyped-call]
        return hidden[0](self, *args, **kwargs)

    scope: dict[str, Any] = {
        "events": events,
        "alias": alias,
        "listened": listened,
        "is_compiling": _is_compiling,
    }
    exec(compile(_PASS_THROUGH, f"{frames.GENERATED}method events>", "exec"), scope)
    wrapper: Callable[..., Any] = functools.wraps(original)(scope["wrapper"])
    wrapper.__tensor_dap_wraps__ = original  # type: ignore[attr-defined]
    return wrapper
