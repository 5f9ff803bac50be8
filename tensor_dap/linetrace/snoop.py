"""``tensor_dap.snoop()``: a drop-in for ``torchsnooper.snoop()`` in its common uses.

As a decorator it traces each call of the function (and, with ``depth=N``, the user code it
calls, N-1 levels down); as a context manager it traces the following lines of the calling
frame, as PySnooper does, by installing a local tracer on that frame. Findings of the enabled
rules (``rules=``, ``"default"`` like ``tensor-dap check``; ``None`` or ``()`` for none) are
printed inline at their line.
"""

from __future__ import annotations

import functools
import inspect
import sys
from types import CodeType
from typing import Any, Callable, Iterable, Optional, TypeVar, Union

from tensor_dap.linetrace.backends import make_backend
from tensor_dap.linetrace.output import Output, Sink
from tensor_dap.linetrace.tracer import Tracer

F = TypeVar("F", bound=Callable[..., Any])


class snoop:  # noqa: N801 - named like the function it replaces
    """Trace a function (``@snoop()``) or a block (``with snoop():``) line by line."""

    def __init__(
        self,
        output: Output = None,
        depth: int = 1,
        watch: Union[str, Iterable[str]] = (),
        rules: Optional[Union[str, Iterable[str]]] = "default",
        nan: bool = False,
        only: Optional[str] = None,
    ) -> None:
        self.output = output
        self.depth = max(1, int(depth))
        self.watch = (watch,) if isinstance(watch, str) else tuple(watch)
        self.rules = rules
        self.nan = nan
        self.only = only
        self._active: list[tuple[Any, Any, Any, Any]] = []

    # -- decorator ------------------------------------------------------------------------
    def __call__(self, function: F) -> F:
        if inspect.isgeneratorfunction(function) or inspect.iscoroutinefunction(function):
            raise NotImplementedError("tensor_dap.snoop: generators and coroutines: not yet")
        roots = {function.__code__}

        @functools.wraps(function)
        def traced(*args: Any, **kwargs: Any) -> Any:
            tracer, backend, watch = self._start(roots)
            try:
                return function(*args, **kwargs)
            finally:
                self._stop(tracer, backend, watch)

        return traced  # type: ignore[return-value]

    # -- context manager ------------------------------------------------------------------
    def __enter__(self) -> snoop:
        frame = sys._getframe(1)
        tracer, backend, watch = self._start(set())
        backend.attach(frame)
        self._active.append((tracer, backend, watch, frame))
        return self

    def __exit__(self, *exc: Any) -> None:
        tracer, backend, watch, frame = self._active.pop()
        backend.detach(frame)
        self._stop(tracer, backend, watch)

    # -- inside ---------------------------------------------------------------------------
    def _start(self, roots: set[CodeType]) -> tuple[Tracer, Any, Any]:
        tracer = Tracer(
            Sink(self.output),
            max_depth=self.depth,
            only=self.only,
            nan=self.nan,
            watch=self.watch,
            roots=roots,
        )
        watch = None
        if self.rules:
            from tensor_dap.agent.engine import Watch

            watch = Watch(rules=self.rules, on_finding=tracer.finding)
            watch.start()
        backend = make_backend(tracer)
        backend.start()
        return tracer, backend, watch

    def _stop(self, tracer: Tracer, backend: Any, watch: Any) -> None:
        backend.stop()
        if watch is not None:
            watch.stop()
        tracer.close()
