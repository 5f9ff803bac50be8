"""The two memory stops over the real adapter, debugpy and debuggee: a memory limit
(``tensorMemoryLimit``) stops at the line that passes it, and an out-of-memory error stops at
the user's line that raised it before the stack unwinds; each stop's message names the device,
its live total and the lines that made the memory, and continuing runs (or fails) on as
without tensor-dap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.dap.client import DapClient
from tests.dap.listening import agent_of, listening_run
from tests.dap.test_attach import _attach
from tests.engine.test_memory_stops import GROWING, LAST_EVALUATION, SMALL_DEVICE, _line


@pytest.fixture
def dap():
    client = DapClient()
    yield client
    client.close()


def _stop(dap: DapClient) -> tuple[dict, dict, dict]:
    """The stop, its top frame and its exceptionInfo."""
    stopped = dap.event("stopped")["body"]
    frame = dap.top_frame(stopped["threadId"])
    info = dap.request("exceptionInfo", {"threadId": stopped["threadId"]})["body"]
    return stopped, frame, info


def _evaluate(dap: DapClient, frame: dict, expression: str) -> str:
    answer = dap.request(
        "evaluate", {"expression": expression, "frameId": frame["id"], "context": "repl"}
    )
    assert answer["success"], answer
    return answer["body"]["result"]


def test_a_memory_limit_stops_at_the_line_that_passes_it(dap: DapClient) -> None:
    dap.start(str(GROWING), [], tensorBreakpoints=[], tensorMemoryLimit="4MiB")
    stopped, frame, info = _stop(dap)
    assert stopped["reason"] == "exception" and stopped["text"] == "memory-limit"
    assert (frame["source"]["path"], frame["line"]) == (str(GROWING), _line(GROWING, "append("))
    assert info["exceptionId"] == "memory-limit"
    description = info["description"]
    assert "live tensor memory on cpu is 5.0 MiB, past the limit of 4.0 MiB" in description
    assert "made at: growing_list.py:5 zeros 2.0 MiB (2 tensors); growing_list.py:8 mul" in (
        description
    )
    # paused while the line runs: its result (counted) not appended yet
    assert _evaluate(dap, frame, "len(outputs)") == "1"
    dap.send("continue", {"threadId": stopped["threadId"]})
    assert dap.event("exited")["body"]["exitCode"] == 0  # the program runs on
    output = "".join(
        m["body"]["output"] for m in dap.seen if m.get("event") == "output" and "body" in m
    )
    assert "kept 10" in output


def test_out_of_memory_stops_before_the_stack_unwinds_and_the_error_goes_on(
    dap: DapClient,
) -> None:
    dap.start(str(SMALL_DEVICE), ["out-of-memory", "uncaught"])
    stopped, frame, info = _stop(dap)
    assert stopped["text"] == "out-of-memory"
    line = _line(SMALL_DEVICE, "return x @ weights")
    assert (frame["source"]["path"], frame["line"]) == (str(SMALL_DEVICE), line)
    description = info["description"]
    assert "`x @ weights` ran out of memory on cpu (torch.OutOfMemoryError: out of memory" in (
        description
    )
    assert "Live tensors on cpu: 12.0 MiB, made at: small_device.py:40 randn 8.0 MiB" in (
        description
    )
    # the frame that raised is still there, with the tensors it was working on
    assert _evaluate(dap, frame, "tuple(x.shape)") == "(4096, 512)"
    dap.send("continue", {"threadId": stopped["threadId"]})
    # then the very error goes on: debugpy's own "uncaught" stop sees it, as without tensor-dap
    stopped, frame, info = _stop(dap)
    assert stopped["reason"] == "exception"
    assert info["exceptionId"].endswith("OutOfMemoryError")
    assert "Tried to allocate 8388608 bytes" in info["description"]
    dap.send("continue", {"threadId": stopped["threadId"]})
    assert dap.event("exited")["body"]["exitCode"] == 1


def test_a_bad_memory_limit_refuses_the_launch(dap: DapClient, tmp_path: Path) -> None:
    dap.request("initialize", {"adapterID": "tensor-dap"})
    answer = dap.request("launch", {"program": str(GROWING), "tensorMemoryLimit": "6XB"})
    assert answer["success"] is False
    assert "tensorMemoryLimit: bad memory size '6XB'" in answer["message"]


def test_tensor_dap_run_takes_the_limit_for_an_attach(tmp_path: Path) -> None:
    """``tensor-dap run --memory-limit 4MiB``: an attached client's ticked checkbox stops there."""
    with listening_run(GROWING, options=["--memory-limit", "4MiB"]) as (process, port):
        dap = DapClient()
        try:
            agent_of(process)
            _attach(dap, port, ["memory-limit"])
            stopped, frame, info = _stop(dap)
            assert stopped["text"] == "memory-limit"
            assert frame["line"] == _line(GROWING, "append(")
            assert "past the limit of 4.0 MiB" in info["description"]
            dap.send("continue", {"threadId": stopped["threadId"]})
            dap.event("terminated")
        finally:
            dap.close()


def test_a_bad_limit_for_tensor_dap_run_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tensor_dap", "run", "--listen", "127.0.0.1:5999"]
        + ["--memory-limit", "lots", str(GROWING)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "tensor-dap run: --memory-limit: bad memory size 'lots': a number of bytes, or with a "
        "unit as in 6GiB, 512MiB, 1.5GB\n"
    )


def test_a_total_dropped_without_backward_stops_where_it_goes(dap: DapClient) -> None:
    """graph-kept's last evaluation: the stop comes when test_loss() returns (its total goes,
    no backward() having gone through it), paused in the frame running then, the message
    naming the accumulating line; the total alive at the program's end is no stop."""
    dap.start(str(LAST_EVALUATION), ["graph-kept"])
    stopped, frame, info = _stop(dap)
    assert stopped["text"] == "graph-kept"
    assert (frame["source"]["path"], frame["line"]) == (
        str(LAST_EVALUATION),
        _line(LAST_EVALUATION, "result = test_loss()"),
    )
    accumulating = _line(LAST_EVALUATION, "total += F.mse_loss")
    assert f"(last_evaluation.py:{accumulating}): total accumulated" in info["description"]
    assert "over 5 iterations" in info["description"]
    assert _evaluate(dap, frame, "len(batches)") == "5"
    dap.send("continue", {"threadId": stopped["threadId"]})
    assert dap.event("exited")["body"]["exitCode"] == 0
    assert not [m for m in dap.seen if m.get("event") == "stopped"][1:]
