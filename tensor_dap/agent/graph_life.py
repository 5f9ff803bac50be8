"""When an autograd graph is freed, and whether a ``backward()`` went through it first.

``graph-kept`` judges a total or a list of losses that may still be backpropagated (gradient
accumulation, a REINFORCE episode's sum) only once its graph is gone: a Python tensor that goes
says nothing, since ``loss = loss / n`` or ``return torch.stack(losses).mean()`` hands its
graph on to a new tensor that ``backward()`` may go through later. So a :class:`GraphLife`
hooks one small callable, a *token*, on the graph's nodes (``node.register_hook``): the nodes
own it, so it is freed with the last of them, and a weak reference to it says when; called as a
hook, it says a backward went through (``consumed``). Nothing here holds a node or a tensor.
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import Any, Callable, Optional


class _Token:
    """The hook the nodes hold; calls back its :class:`GraphLife` when a backward runs it."""

    __slots__ = ("life", "__weakref__")

    def __init__(self, life: GraphLife) -> None:
        self.life = life

    def __call__(self, *_: Any) -> None:
        self.life.consumed = True
        if self.life.on_backward is not None:
            self.life.on_backward()


class GraphLife:
    """Watches the nodes given to :meth:`hold`: ``consumed`` once a backward went through one
    of them; ``on_gone(self)`` when the last of them is freed (in the process that made this,
    not while the interpreter shuts down)."""

    def __init__(
        self,
        on_gone: Callable[[GraphLife], None],
        on_backward: Optional[Callable[[], None]] = None,
    ) -> None:
        self.consumed = False
        self.on_backward = on_backward
        self._on_gone: Optional[Callable[[GraphLife], None]] = on_gone
        self._pid = os.getpid()
        token = _Token(self)
        #: held here until a node holds it (:meth:`hold`)
        self._token: Optional[_Token] = token
        self._ref = weakref.ref(token, self._gone)

    def hold(self, node: Any) -> bool:
        """Hook the token on ``node``; False when the node takes no hooks."""
        token = self._ref()
        if token is None:
            return False
        try:
            node.register_hook(token)
        except Exception:
            return False
        self._token = None  # the nodes hold it now
        return True

    @property
    def alive(self) -> bool:
        """Whether a node holding the token (or this, before any did) is still alive, in the
        process that made this (a forked DataLoader worker's copies are the parent's)."""
        return self._ref() is not None and os.getpid() == self._pid

    def forget(self) -> None:
        """Call nothing back any more."""
        self._on_gone = None
        self.on_backward = None

    def _gone(self, _ref: Any) -> None:
        on_gone, self._on_gone = self._on_gone, None
        if on_gone is None or sys.is_finalizing():
            return
        try:
            if os.getpid() == self._pid:
                on_gone(self)
        except Exception:  # a weak reference's callback: nothing may reach the program
            pass
