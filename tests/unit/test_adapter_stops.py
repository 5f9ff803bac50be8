"""The adapter's rewrite of a stop on a finding (tensor_dap.adapter.tensor_breakpoints), on the
messages debugpy sends, without debugpy: the finding is decoded from the stop's text, and a
damaged one leaves the stop as it came and tells the user, without ending the session."""

from __future__ import annotations

from typing import Any, Optional

import pytest

from tensor_dap.adapter.proxy import Refusal
from tensor_dap.adapter.tensor_breakpoints import TensorBreakpoints
from tensor_dap.findings import Finding, stop_text


class _Channel:
    ranks: Optional[str] = None

    def __init__(self) -> None:
        self.sent: list[list[str]] = []

    def set_rules(self, rules: list[str]) -> None:
        self.sent.append(list(rules))


def _breakpoints() -> tuple[TensorBreakpoints, list[str]]:
    told: list[str] = []
    return TensorBreakpoints(_Channel(), told.append), told  # type: ignore[arg-type]


FINDING = Finding(
    "broadcast",
    "/x/train.py",
    5,
    "`a - b`: (4,) and (4, 1) broadcast to (4, 4)",
    process={"rank": 1},
)
NAME = "tensor_dap.agent.suspend.TensorBreakpoint"


def _stopped(description: str) -> dict[str, Any]:
    body = {"reason": "exception", "text": NAME, "description": description, "threadId": 1}
    return {"type": "event", "event": "stopped", "body": body}


def _exception_info(description: str) -> dict[str, Any]:
    trace = f'  File "/x/train.py", line 5, in <module>\n    y = a - b\n{NAME}: {description}\n'
    body = {
        "exceptionId": NAME,
        "description": description,
        "breakMode": "unhandled",
        "details": {"message": description, "typeName": NAME, "stackTrace": trace},
    }
    return {"type": "response", "command": "exceptionInfo", "body": body}


def test_a_stop_on_a_finding_is_named_after_its_rule() -> None:
    breakpoints, told = _breakpoints()
    stopped = _stopped(stop_text(FINDING))
    breakpoints.stopped(stopped)
    assert stopped["body"]["text"] == "broadcast"
    assert stopped["body"]["description"] == f"Paused on broadcast: [rank 1] {FINDING.message}"
    info = _exception_info(stop_text(FINDING))
    breakpoints.exception_info(info)
    body = info["body"]
    assert (body["exceptionId"], body["breakMode"]) == ("broadcast", "always")
    assert body["description"] == body["details"]["message"] == f"[rank 1] {FINDING.message}"
    assert body["details"]["fullTypeName"] == "tensor-dap.broadcast"
    assert body["details"]["stackTrace"].endswith("    y = a - b\n")
    assert told == []


def test_a_damaged_finding_leaves_the_stop_and_says_so() -> None:
    breakpoints, told = _breakpoints()
    damaged = stop_text(FINDING).replace('"line":5', '"line":"five"')
    stopped = _stopped(damaged)
    breakpoints.stopped(stopped)
    assert (stopped["body"]["text"], stopped["body"]["description"]) == (NAME, damaged)
    assert len(told) == 1 and "'line' is 'five', not an integer" in told[0]
    info = _exception_info(damaged)
    breakpoints.exception_info(info)
    assert info["body"]["exceptionId"] == NAME


def test_other_exceptions_and_unknown_rules_pass_through() -> None:
    breakpoints, told = _breakpoints()
    plain = {"reason": "exception", "text": "ZeroDivisionError", "description": "division by zero"}
    message = {"type": "event", "event": "stopped", "body": dict(plain)}
    breakpoints.stopped(message)
    assert message["body"] == plain
    unknown = Finding("no-such-rule", "/x/train.py", 5, "?")
    stopped = _stopped(stop_text(unknown))
    breakpoints.stopped(stopped)
    assert stopped["body"]["text"] == NAME
    assert told == []


def test_an_unknown_tensor_breakpoint_refuses_the_launch() -> None:
    breakpoints, _ = _breakpoints()
    request = {"arguments": {"tensorBreakpoints": ["broadcast", "no-such-rule"]}}
    with pytest.raises(Refusal, match="no-such-rule"):
        breakpoints.take(request)
    breakpoints.take({"arguments": {"tensorBreakpoints": ["broadcast"]}})
    assert breakpoints.rules == ["broadcast"]
    assert breakpoints.channel.sent[-1] == ["broadcast"]  # type: ignore[attr-defined]
