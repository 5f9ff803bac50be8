"""Tensor data breakpoints on the wire ("Break on Value Change"); debugpy has none.

- ``initialize``: ``supportsDataBreakpoints`` is added to debugpy's capabilities.
- ``dataBreakpointInfo`` (a variable: ``variablesReference`` + ``name``; a WATCH expression:
  ``name`` + ``frameId``) becomes an ``evaluate`` of
  :func:`tensor_dap.agent.data_watch.offer` in the variable's frame; its response is made the
  ``dataBreakpointInfo`` response (the tensor's data id, or ``null`` and why). A variable's
  expression and frame come from the ``scopes`` and ``variables`` debugpy answered (the
  ``evaluateName`` of each child).
- ``setDataBreakpoints`` is answered here: the agents arm the ids (agent channel) and say which.
- A stop on :class:`~tensor_dap.agent.data_stop.DataBreakpointHit` becomes a stop with reason
  ``"data breakpoint"``, what changed as its description; a tensor freed is a ``breakpoint``
  event (unverified, with the reason) and a line in the debug console.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import json
from typing import Any, Callable, Optional

from tensor_dap.adapter.agent_channel import AgentChannel
from tensor_dap.adapter.proxy import Answer, Message
from tensor_dap.agent.data_stop import hit_in_stop, names_hit

_OFFER = "__import__('tensor_dap.agent.data_watch', fromlist=['offer']).offer({value}, {label!r})"


class DataBreakpoints:
    """The data breakpoints of one session."""

    def __init__(
        self,
        channel: AgentChannel,
        to_client: Callable[[Message], None],
        tell_client: Callable[[str], None],
    ) -> None:
        self.channel = channel
        self._to_client = to_client
        self._tell_client = tell_client
        channel.on_message = self.agent_message
        #: variablesReference -> the frame its variables live in
        self._frames: dict[int, int] = {}
        #: (variablesReference, name) -> debugpy's evaluateName of that child
        self._names: dict[tuple[int, str], str] = {}
        #: seq of a scopes/variables request -> its frameId/variablesReference
        self._asked: dict[int, tuple[str, int]] = {}
        #: seq of a dataBreakpointInfo made an evaluate -> the label of its tensor
        self._infos: dict[int, str] = {}
        self._ids = itertools.count(1)
        #: data id -> the breakpoint id the client knows it by
        self._breakpoint_ids: dict[str, int] = {}

    # -- capabilities and bookkeeping ------------------------------------------------------
    def advertise(self, message: Message) -> None:
        body = message.get("body") or {}
        body["supportsDataBreakpoints"] = True
        message["body"] = body

    def scopes_request(self, message: Message) -> None:
        frame = _arguments(message).get("frameId")
        if isinstance(frame, int):
            self._asked[message["seq"]] = ("frame", frame)

    def variables_request(self, message: Message) -> None:
        reference = _arguments(message).get("variablesReference")
        if isinstance(reference, int):
            self._asked[message["seq"]] = ("variables", reference)

    def scopes_response(self, message: Message) -> None:
        asked = self._asked.pop(message.get("request_seq", -1), None)
        if asked is None:
            return
        for scope in (message.get("body") or {}).get("scopes") or []:
            reference = scope.get("variablesReference") if isinstance(scope, dict) else None
            if reference:
                self._frames[reference] = asked[1]

    def variables_response(self, message: Message) -> None:
        asked = self._asked.pop(message.get("request_seq", -1), None)
        if asked is None:
            return
        parent = asked[1]
        frame = self._frames.get(parent)
        for variable in (message.get("body") or {}).get("variables") or []:
            if not isinstance(variable, dict):
                continue
            name, expression = variable.get("name"), variable.get("evaluateName")
            if isinstance(name, str) and isinstance(expression, str):
                self._names[(parent, name)] = expression
            child = variable.get("variablesReference")
            if child and frame is not None:
                self._frames[child] = frame

    # -- dataBreakpointInfo ------------------------------------------------------------------
    def info_request(self, message: Message) -> None:
        """Made an ``evaluate`` of ``offer(<the variable>)`` in its frame (or answered here:
        no data breakpoint, and why)."""
        arguments = _arguments(message)
        name = str(arguments.get("name") or "")
        reference = arguments.get("variablesReference")
        if reference:
            expression = self._names.get((reference, name))
            frame = self._frames.get(reference)
        else:
            expression, frame = name, arguments.get("frameId")
        if not expression or frame is None:
            raise Answer({"dataId": None, "description": f"tensor-dap cannot find {name}"})
        message["command"] = "evaluate"
        message["arguments"] = {
            "expression": _OFFER.format(value=f"({expression})", label=expression),
            "frameId": frame,
            "context": "repl",
        }
        self._infos[message["seq"]] = expression

    def evaluate_response(self, message: Message) -> None:
        label = self._infos.pop(message.get("request_seq", -1), None)
        if label is None:
            return
        message["command"] = "dataBreakpointInfo"
        body = message.get("body") or {}
        answer: dict[str, Any] = {"dataId": None, "description": f"{label}: not a tensor"}
        if message.get("success"):
            with contextlib.suppress(ValueError, SyntaxError):
                answer = json.loads(ast.literal_eval(str(body.get("result"))))
        else:
            answer["description"] = f"{label}: {message.get('message') or 'cannot evaluate'}"
        if answer.get("dataId") is not None:
            answer["accessTypes"] = ["write"]
            answer["canPersist"] = False
        message["success"] = True
        message.pop("message", None)
        message["body"] = answer

    # -- setDataBreakpoints -------------------------------------------------------------------
    def set_request(self, message: Message) -> None:
        """Answered here: each data id armed by the agent of its process, or why not."""
        wanted = _arguments(message).get("breakpoints")
        wanted = wanted if isinstance(wanted, list) else []
        specs = [
            {"dataId": b.get("dataId"), "condition": b.get("condition") or ""}
            for b in wanted
            if isinstance(b, dict)
        ]
        results: dict[str, dict[str, Any]] = {}
        for reply in self.channel.ask({"dataBreakpoints": specs}):
            results.update(reply.get("results") or {})
        answered = []
        for spec in specs:
            data_id = str(spec["dataId"])
            result = results.get(data_id) or {
                "verified": False,
                "message": "the tensor is gone (or its process is)",
            }
            number = self._breakpoint_ids.setdefault(data_id, next(self._ids))
            answered.append({"id": number, **result})
        raise Answer({"breakpoints": answered})

    # -- what the debuggee says ---------------------------------------------------------------
    def stopped(self, message: Message) -> None:
        """A stop on a write of an armed tensor: reason ``data breakpoint``."""
        body = message.get("body") or {}
        self._frames.clear()  # references of the last stop are gone
        self._names.clear()
        if body.get("reason") != "exception" or not names_hit(body.get("text")):
            return
        hit = hit_in_stop(body.get("description"))
        if hit is None:
            return
        body["reason"] = "data breakpoint"
        body["description"] = hit["text"]
        body["text"] = hit["label"]
        number = self._breakpoint_ids.get(hit["dataId"])
        if number is not None:
            body["hitBreakpointIds"] = [number]

    def agent_message(self, message: dict[str, Any]) -> None:
        data_id = message.get("dataBreakpointGone")
        if data_id is None:
            return
        text = str(message.get("message") or "the tensor was freed")
        number: Optional[int] = self._breakpoint_ids.get(str(data_id))
        if number is not None:
            self._to_client(
                {
                    "type": "event",
                    "event": "breakpoint",
                    "body": {
                        "reason": "changed",
                        "breakpoint": {"id": number, "verified": False, "message": text},
                    },
                }
            )
        self._tell_client(f"tensor-dap: {text}")


def _arguments(request: Message) -> dict[str, Any]:
    """A request's arguments (a malformed request's: none, and debugpy says what is wrong)."""
    arguments = request.get("arguments")
    return arguments if isinstance(arguments, dict) else {}
