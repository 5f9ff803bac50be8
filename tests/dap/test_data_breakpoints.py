"""Tensor data breakpoints ("Break on Value Change") end to end: a real DAP client, the real
adapter and debugpy, a real debuggee. Each stop is on the user's line that wrote the tensor,
with what changed, as a user sees it in VS Code (or any DAP client)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.dap.client import DapClient
from tests.dap.listening import attached

PROGRAMS = Path(__file__).parent / "data_programs"


@pytest.fixture
def dap():
    client = DapClient()
    yield client
    client.close()


def _pause_at(dap: DapClient, script: Path, line: int) -> tuple[int, int]:
    """Launch ``script`` to a line breakpoint; (thread id, top frame id)."""
    init = dap.start(str(script), [], breakpoints={str(script): [line]})
    assert init["body"]["supportsDataBreakpoints"] is True
    stopped = dap.event("stopped")["body"]
    assert stopped["reason"] == "breakpoint"
    # the line breakpoint off (in a loop it would stop again first)
    dap.request("setBreakpoints", {"source": {"path": str(script)}, "breakpoints": []})
    return stopped["threadId"], dap.top_frame(stopped["threadId"])["id"]


def _locals(dap: DapClient, frame_id: int) -> dict[str, Any]:
    scopes = dap.request("scopes", {"frameId": frame_id})["body"]["scopes"]
    reference = scopes[0]["variablesReference"]
    variables = dap.request("variables", {"variablesReference": reference})["body"]["variables"]
    return {"reference": reference, **{v["name"]: v for v in variables}}


def _info(dap: DapClient, **arguments: Any) -> dict[str, Any]:
    response = dap.request("dataBreakpointInfo", arguments)
    assert response["success"], response
    return response["body"]


def _arm(dap: DapClient, *breakpoints: dict[str, Any]) -> list[dict[str, Any]]:
    response = dap.request("setDataBreakpoints", {"breakpoints": list(breakpoints)})
    assert response["success"], response
    return response["body"]["breakpoints"]


def _continue_to_write(dap: DapClient, thread: int) -> tuple[dict[str, Any], int]:
    """Continue; the data breakpoint stop's body and line."""
    dap.request("continue", {"threadId": thread})
    stopped = dap.event("stopped")["body"]
    assert stopped["reason"] == "data breakpoint", stopped
    return stopped, dap.top_frame(stopped["threadId"])["line"]


def _variable_info(dap: DapClient, frame: int, name: str) -> dict[str, Any]:
    variables = _locals(dap, frame)
    return _info(dap, variablesReference=variables["reference"], name=name)


def _finish(dap: DapClient, thread: int) -> None:
    """Remove the data breakpoints and run to the end."""
    _arm(dap)
    dap.send("continue", {"threadId": thread})
    dap.event("terminated")


def test_a_local_stops_at_each_kind_of_write(dap: DapClient) -> None:
    script = PROGRAMS / "writes.py"
    thread, frame = _pause_at(dap, script, 7)
    info = _variable_info(dap, frame, "w")
    assert info["dataId"] and info["accessTypes"] == ["write"]
    assert info["description"].startswith("w tensor<(4,) float32 cpu")
    (armed,) = _arm(dap, {"dataId": info["dataId"]})
    assert armed["verified"] is True
    expected = [
        (9, "w written by in-place add_: 4 of 4 elements changed, max |change| 1"),
        (10, "w written by indexed assignment: 1 of 4 elements changed, max |change| 4"),
        (12, "w written by in-place mul_: 3 of 4 elements changed, max |change| 2"),
        (
            13,
            "w written by .data assignment: 4 of 4 elements changed, 4 became non-finite (NaN/inf)",
        ),
        (14, "w written by in-place copy_: 4 of 4 elements changed"),
    ]
    for line, text in expected:
        stopped, stop_line = _continue_to_write(dap, thread)
        assert (stop_line, stopped["description"]) == (line, text)
        assert stopped["text"] == "w"
        assert stopped["hitBreakpointIds"] == [armed["id"]]
    _finish(dap, thread)


@pytest.mark.parametrize(
    ("expression", "line", "text"),
    [
        # a parameter: written by the optimizer, the stop on the user's step() line
        (
            "model.fc.weight",
            26,
            "model.fc.weight written by Adam.step(): 8 of 8 elements changed, max |change| 0.1",
        ),
        # a buffer written in the user's forward
        ("model.seen", 14, "model.seen written by in-place add_: 1 of 1 elements changed"),
    ],
    ids=["parameter", "buffer"],
)
def test_a_module_tensor_from_watch(dap: DapClient, expression: str, line: int, text: str) -> None:
    script = PROGRAMS / "training.py"
    thread, frame = _pause_at(dap, script, 23)
    # WATCH: an expression in the frame
    info = _info(dap, name=expression, frameId=frame)
    assert info["description"].startswith(f"{expression} tensor<")
    _arm(dap, {"dataId": info["dataId"]})
    stopped, stop_line = _continue_to_write(dap, thread)
    assert stop_line == line
    assert stopped["description"].startswith(text)
    _finish(dap, thread)


@pytest.mark.parametrize(
    ("script", "pause", "write", "layer", "expression", "optimizer"),
    [
        ("training.py", 23, 26, "fc", "model.fc", "Adam"),
        # a layer of an nn.Sequential is a child named "0": VS Code offers "Break on Value
        # Change" only when dataBreakpointInfo gives a data id, so it needs an evaluateName
        ("sequential.py", 11, 13, "0", "model[0]", "SGD"),
    ],
    ids=["attribute", "sequential-layer"],
)
def test_a_parameter_from_variables(
    dap: DapClient, script: str, pause: int, write: int, layer: str, expression: str, optimizer: str
) -> None:
    """VARIABLES: model > layer > weight, as a user expands it; the stop at the optimizer step."""
    thread, frame = _pause_at(dap, PROGRAMS / script, pause)
    model = _locals(dap, frame)["model"]
    children = dap.request("variables", {"variablesReference": model["variablesReference"]})
    child = next(v for v in children["body"]["variables"] if v["name"] == layer)
    assert child["evaluateName"] == expression
    expanded = dap.request("variables", {"variablesReference": child["variablesReference"]})
    assert "weight" in {v["name"] for v in expanded["body"]["variables"]}
    info = _info(dap, variablesReference=child["variablesReference"], name="weight")
    assert info["description"] == f"{expression}.weight tensor<(2, 4) float32 cpu grad>"
    _arm(dap, {"dataId": info["dataId"]})
    stopped, line = _continue_to_write(dap, thread)
    assert line == write
    assert stopped["description"].startswith(
        f"{expression}.weight written by {optimizer}.step(): 8 of 8"
    )
    _finish(dap, thread)


def test_a_condition_stops_only_when_it_holds(dap: DapClient) -> None:
    script = PROGRAMS / "conditions.py"
    thread, frame = _pause_at(dap, script, 7)
    info = _variable_info(dap, frame, "state")
    condition = "not torch.isfinite(value).all()"
    _arm(dap, {"dataId": info["dataId"], "condition": condition})
    stopped, line = _continue_to_write(dap, thread)
    assert line == 9
    assert stopped["description"] == (
        "state written by in-place mul_: 3 of 3 elements changed, 3 became non-finite "
        f"(NaN/inf) (condition `{condition}` holds)"
    )
    _finish(dap, thread)


def test_a_value_condition(dap: DapClient) -> None:
    script = PROGRAMS / "conditions.py"
    thread, frame = _pause_at(dap, script, 7)
    info = _variable_info(dap, frame, "state")
    _arm(dap, {"dataId": info["dataId"], "condition": "value.max() > 3.5"})
    stopped, line = _continue_to_write(dap, thread)
    assert line == 11
    # 1 -> 2 -> 3 -> 4: the third write
    frame = dap.top_frame(stopped["threadId"])["id"]
    step = dap.request("evaluate", {"expression": "step", "frameId": frame})["body"]["result"]
    assert step == "2"
    _finish(dap, thread)


def test_rebinding_containers_and_a_freed_tensor(dap: DapClient) -> None:
    script = PROGRAMS / "rebinding.py"
    thread, frame = _pause_at(dap, script, 8)
    variables = _locals(dap, frame)
    original = _info(dap, variablesReference=variables["reference"], name="original")
    doomed = _info(dap, variablesReference=variables["reference"], name="doomed")
    # an element of a container shown in VARIABLES
    items = variables["items"]["variablesReference"]
    children = dap.request("variables", {"variablesReference": items})["body"]["variables"]
    assert "'first'" in {c["name"] for c in children}
    element = _info(dap, variablesReference=items, name="'first'")
    assert element["description"].startswith("items['first'] tensor<(3,) float32 cpu")
    armed = _arm(
        dap,
        {"dataId": original["dataId"]},
        {"dataId": doomed["dataId"]},
        {"dataId": element["dataId"]},
    )
    assert [a["verified"] for a in armed] == [True, True, True]
    stopped, line = _continue_to_write(dap, thread)
    assert (line, stopped["description"]) == (
        11,
        "original written by in-place sub_: 2 of 2 elements changed, max |change| 1",
    )
    dap.request("continue", {"threadId": thread})
    gone = dap.event("breakpoint")["body"]
    assert gone["reason"] == "changed"
    assert gone["breakpoint"] == {
        "id": armed[1]["id"],
        "verified": False,
        "message": "doomed was freed: its data breakpoint is removed",
    }
    stopped = dap.event("stopped")["body"]
    assert stopped["reason"] == "data breakpoint"
    assert dap.top_frame(stopped["threadId"])["line"] == 13
    assert stopped["description"] == (
        "items['first'] written by in-place add_: 3 of 3 elements changed, max |change| 2"
    )
    _finish(dap, thread)


def test_not_a_tensor_and_removal(dap: DapClient) -> None:
    script = PROGRAMS / "writes.py"
    thread, frame = _pause_at(dap, script, 7)
    info = _info(dap, name="len('ab')", frameId=frame)
    assert info == {"dataId": None, "description": "len('ab') is a int, not a tensor"}
    info = _variable_info(dap, frame, "w")
    _arm(dap, {"dataId": info["dataId"]})
    assert _arm(dap) == []  # the user removed it: the program runs to its end
    _finish(dap, thread)


def test_attached_to_tensor_dap_run() -> None:
    """The same over attach: the agent listens (``tensor-dap run --listen --wait``)."""
    script = PROGRAMS / "writes.py"
    initialize = {"clientID": "pytest", "adapterID": "tensor-dap"}
    with attached(script, initialize) as dap:
        source = {"path": str(script)}
        dap.request("setBreakpoints", {"source": source, "breakpoints": [{"line": 7}]})
        dap.request("configurationDone")
        thread = dap.event("stopped")["body"]["threadId"]
        info = _variable_info(dap, dap.top_frame(thread)["id"], "w")
        assert _arm(dap, {"dataId": info["dataId"]})[0]["verified"] is True
        stopped, line = _continue_to_write(dap, thread)
        assert (line, stopped["description"]) == (
            9,
            "w written by in-place add_: 4 of 4 elements changed, max |change| 1",
        )
        _finish(dap, thread)
