"""A data breakpoint's stop on the wire: the debuggee pauses on a :class:`DataBreakpointHit`
whose text carries the breakpoint's id and what changed; the adapter
(:mod:`tensor_dap.adapter.data_breakpoints`) decodes it (:func:`hit_in_stop`) into a stop with
reason ``"data breakpoint"``. No torch: the adapter imports it.
"""

from __future__ import annotations

import json
import types
from typing import Any, Optional

_MARK = "tensor-dap data breakpoint "


class DataBreakpointHit(Exception):
    """The exception debugpy stops on when an armed tensor was written (never raised into
    user code). Its ``str`` (the stop's text) carries the hit; its ``repr`` what a person reads."""

    def __init__(self, data_id: str, label: str, text: str) -> None:
        super().__init__(text)
        self.data_id, self.label, self.text = data_id, label, text

    def __str__(self) -> str:
        return _MARK + json.dumps({"dataId": self.data_id, "label": self.label, "text": self.text})

    def __repr__(self) -> str:
        return self.text


def hit_in_stop(description: Any) -> Optional[dict[str, str]]:
    """The hit a stop's description carries (``dataId``, ``label``, ``text``), if any."""
    text = str(description or "")
    start = text.find(_MARK)
    if start < 0:
        return None
    try:
        hit = json.loads(text[start + len(_MARK) :])
    except ValueError:
        return None
    if not isinstance(hit, dict) or not {"dataId", "label", "text"} <= hit.keys():
        return None
    return {key: str(hit[key]) for key in ("dataId", "label", "text")}


def names_hit(text: Any) -> bool:
    """Whether debugpy's exception name (a stop's ``text``) is :class:`DataBreakpointHit`."""
    return str(text or "").split(" ", 1)[0].endswith(DataBreakpointHit.__name__)


def suspend_on_write(hit: DataBreakpointHit, frame: Optional[types.FrameType]) -> None:
    """Pause the debugger in ``frame`` (the user's line that wrote the tensor) on ``hit``."""
    if frame is None:
        return
    import debugpy

    if not debugpy.is_client_connected():
        return
    trace = types.TracebackType(None, frame, frame.f_lasti, frame.f_lineno)
    hit.__traceback__ = trace
    debugpy.trigger_exception_handler((DataBreakpointHit, hit, trace), as_uncaught=False)
