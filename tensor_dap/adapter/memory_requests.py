"""The memory view on the wire: ``evaluate`` of ``tensor-dap memory`` and ``tensorMemory``.

- ``evaluate`` with the expression ``tensor-dap memory`` (any client: a debug console, WATCH)
  becomes an ``evaluate`` of :func:`tensor_dap.agent.memory_view.table` in the paused frame.
  debugpy answers it: in the debug console (``repl``) the whole table, elsewhere its one-line
  total; its ``variablesReference`` expands per device -> per line -> holders.
- ``tensorMemory`` (tensor-dap's own request; VS Code's Tensor Memory view) becomes an
  ``evaluate`` of :func:`~tensor_dap.agent.memory_view.as_json`, untruncated and unquoted
  (context ``clipboard``, ``rawString``); its response carries the snapshot as its body.

Without a ``frameId``, the top frame of the last ``stackTrace`` answered since the last stop is
used (every client asks for the stack when the program stops).
"""

from __future__ import annotations

import json
from typing import Any, Optional

from tensor_dap.adapter.proxy import Message, Refusal

EXPRESSION = "tensor-dap memory"
"""What a user types in the debug console or WATCH (documented in the README)."""

_CALL = "__import__('tensor_dap.agent.memory_view', fromlist=['{name}']).{name}()"


class MemoryRequests:
    """The memory view's requests of one session."""

    def __init__(self) -> None:
        #: top frame of the latest stack trace since the last stop
        self._top_frame: Optional[int] = None
        #: seq of stackTrace requests from the top of a stack
        self._stacks: set[int] = set()
        #: seq of tensorMemory requests made evaluates
        self._snapshots: set[int] = set()

    # -- the frame to evaluate in ------------------------------------------------------------
    def stack_request(self, message: Message) -> None:
        if not _arguments(message).get("startFrame"):
            self._stacks.add(message["seq"])

    def stack_response(self, message: Message) -> None:
        if message.get("request_seq") not in self._stacks:
            return
        self._stacks.discard(message["request_seq"])
        frames = (message.get("body") or {}).get("stackFrames") or []
        if message.get("success") and frames and isinstance(frames[0], dict):
            self._top_frame = frames[0].get("id")

    def stopped(self, message: Message) -> None:
        self._top_frame = None  # the last stop's frames are gone

    def _frame(self, arguments: dict[str, Any]) -> Any:
        frame = arguments.get("frameId")
        if frame is None:
            frame = self._top_frame
        if frame is None:
            raise Refusal("tensor-dap memory: pause the program first (no frame to look from)")
        return frame

    # -- the requests ---------------------------------------------------------------------------
    def evaluate_request(self, message: Message) -> None:
        arguments = _arguments(message)
        if str(arguments.get("expression") or "").strip() != EXPRESSION:
            return
        message["arguments"] = dict(
            arguments, expression=_CALL.format(name="table"), frameId=self._frame(arguments)
        )

    def memory_request(self, message: Message) -> None:
        """``tensorMemory``: sent on to debugpy as an ``evaluate``."""
        frame = self._frame(_arguments(message))
        message["command"] = "evaluate"
        message["arguments"] = {
            "expression": _CALL.format(name="as_json"),
            "frameId": frame,
            "context": "clipboard",
            "format": {"rawString": True},
        }
        self._snapshots.add(message["seq"])

    def evaluate_response(self, message: Message) -> None:
        if message.get("request_seq") not in self._snapshots:
            return
        self._snapshots.discard(message["request_seq"])
        message["command"] = "tensorMemory"
        if not message.get("success"):
            return
        try:
            message["body"] = json.loads(str((message.get("body") or {}).get("result")))
        except ValueError:
            message["success"] = False
            message["message"] = "tensor-dap memory: the debuggee's answer is not JSON"
            message["body"] = {}


def _arguments(request: Message) -> dict[str, Any]:
    arguments = request.get("arguments")
    return arguments if isinstance(arguments, dict) else {}
