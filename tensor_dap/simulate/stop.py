"""The one-line stop for what ``--simulate cuda`` cannot simulate.

A call with no CPU meaning (a CUDA stream, a CUDA-only kernel, a DDP comm hook) would fail later
and obscurely; it stops the run at once instead, naming the call and the user's line, with exit
status 1 and no traceback (a :class:`SystemExit`, which ``except Exception`` does not swallow).
"""

from __future__ import annotations

import sys
from typing import Any, Callable

__all__ = ["NotSimulated", "caller_line", "refuse"]


class NotSimulated(SystemExit):
    """A call the simulation cannot run: ends the program with one line (exit status 1)."""


def caller_line() -> str:
    """`` (at path:line)`` of the program's line that called the caller of this function (a
    call the simulation refuses or changes), or ``""`` when no user frame is on the stack."""
    from tensor_dap.agent.frames import is_user_code

    frame = sys._getframe(2)
    while frame is not None and not is_user_code(frame.f_code):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return ""
    return f" (at {frame.f_code.co_filename}:{frame.f_lineno})"


def refuse(name: str, why: str) -> Callable[..., Any]:
    """A function that, called in place of ``name``, stops the run saying ``why``."""

    def stop(*args: Any, **kwargs: Any) -> Any:
        raise NotSimulated(
            f"tensor-dap --simulate cuda: {name}{caller_line()} cannot be simulated on the CPU "
            f"({why}); run this part on a GPU"
        )

    stop.__name__ = name.rsplit(".", 1)[-1]
    return stop
