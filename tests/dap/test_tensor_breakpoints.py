"""The debug adapter end to end: a real DAP client over stdio, the real debugpy, a real
debuggee. Each tensor breakpoint stops on the user's line with its rule and message."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tensor_dap.agent.rules import RULE_IDS
from tests.conftest import SAMPLES, expected_findings, paused_lines, script_memory_limit
from tests.dap.client import DapClient
from tests.simulate.test_simulate_cuda import SCRIPTS, _marked


@pytest.fixture
def dap():
    client = DapClient()
    yield client
    client.close()


def test_rule_checkboxes_are_advertised(dap: DapClient) -> None:
    init = dap.request("initialize", {"adapterID": "tensor-dap"})
    filters = {f["filter"]: f["label"] for f in init["body"]["exceptionBreakpointFilters"]}
    for rule in RULE_IDS:
        assert rule in filters
    assert filters["device-mismatch"] == "Device mismatch"
    assert filters["leaves-device"] == "Tensor leaves device"
    assert "raised" in filters and "uncaught" in filters  # debugpy's own stay


BUG_SCRIPTS = sorted(p for p in SAMPLES.glob("*.py") if expected_findings(p))


# The samples are CUDA code: launched as a user without a GPU launches them, "simulate": "cuda".
@pytest.mark.parametrize("script", BUG_SCRIPTS, ids=lambda p: p.stem)
def test_stops_on_the_user_line_with_rule_and_message(script: Path, dap: DapClient) -> None:
    (rule, line), *_ = sorted(expected_findings(script), key=lambda pair: pair[1])
    line = paused_lines(script).get(rule, line)
    limit = script_memory_limit(script)
    extra = {"tensorMemoryLimit": limit} if limit else {}
    dap.start(str(script), [rule], simulate="cuda", **extra)
    stopped = dap.event("stopped")["body"]
    assert stopped["reason"] == "exception"
    assert stopped["text"] == rule
    frame = dap.top_frame(stopped["threadId"])
    assert (frame["source"]["path"], frame["line"]) == (str(script), line)
    info = dap.request("exceptionInfo", {"threadId": stopped["threadId"]})["body"]
    assert info["exceptionId"] == rule
    assert info["description"].startswith("`")
    assert info["details"]["typeName"] == rule
    stops = [line]
    while True:  # each later finding of the rule stops too, at its own line
        dap.send("continue", {"threadId": stopped["threadId"]})
        event = dap.next(lambda m: m.get("event") in ("stopped", "terminated"))
        if event["event"] == "terminated":
            break
        stopped = event["body"]
        stops.append(dap.top_frame(stopped["threadId"])["line"])
    assert len(stops) == len(set(stops)), stops  # a line stops once per session


def test_masked_scatter_stop_names_tensors(dap: DapClient) -> None:
    script = SAMPLES / "masked_scatter_on_cpu.py"
    dap.start(str(script), [], tensorBreakpoints=["device-mismatch"], simulate="cuda")
    stopped = dap.event("stopped")["body"]
    info = dap.request("exceptionInfo", {"threadId": stopped["threadId"]})["body"]
    assert "y is on cpu (created at masked_scatter_on_cpu.py:16 by zeros)" in info["description"]
    assert "mask is on cuda:0" in info["description"]
    # the exception widget's trace: the user's frame, not the message again under our class
    trace = info["details"]["stackTrace"]
    assert "masked_scatter_on_cpu.py" in trace and "y.masked_scatter_(mask, x)" in trace
    assert "TensorBreakpoint" not in trace
    # CALL STACK lists the program's threads, not tensor-dap's own
    names = [t["name"] for t in dap.request("threads")["body"]["threads"]]
    assert names and not [n for n in names if "tensor-dap" in n], names
    # the user's variables are there to inspect, before the op ran
    frame = dap.top_frame(stopped["threadId"])
    scopes = dap.request("scopes", {"frameId": frame["id"]})["body"]["scopes"]
    variables = dap.request("variables", {"variablesReference": scopes[0]["variablesReference"]})
    names = {v["name"] for v in variables["body"]["variables"]}
    assert {"y", "mask", "x"} <= names


def test_unticked_rules_do_not_stop_and_line_breakpoints_still_work(dap: DapClient) -> None:
    script = SAMPLES / "silent_broadcast.py"
    dap.start(str(script), [], breakpoints={str(script): [27]})
    stopped = dap.event("stopped")["body"]
    assert stopped["reason"] == "breakpoint"
    assert dap.top_frame(stopped["threadId"])["line"] == 27
    dap.request("next", {"threadId": stopped["threadId"]})
    stopped = dap.event("stopped")["body"]
    assert stopped["reason"] == "step"
    assert dap.top_frame(stopped["threadId"])["line"] == 28
    dap.request("setBreakpoints", {"source": {"path": str(script)}, "breakpoints": []})
    dap.send("continue", {"threadId": stopped["threadId"]})
    dap.event("terminated")


def test_ticking_a_rule_while_the_program_runs(dap: DapClient, tmp_path: Path) -> None:
    script = tmp_path / "later.py"
    script.write_text(
        "import time\n"
        "import torch\n"
        "for step in range(400):\n"
        "    time.sleep(0.05)\n"
        "    y = torch.ones(4) - torch.ones(4, 1)\n"
    )
    dap.start(str(script), [])
    dap.event("process")
    time.sleep(1.0)  # running, nothing installed
    dap.request("setExceptionBreakpoints", {"filters": ["broadcast"]})
    stopped = dap.event("stopped")["body"]
    assert stopped["text"] == "broadcast"
    assert dap.top_frame(stopped["threadId"])["line"] == 5
    dap.request("setExceptionBreakpoints", {"filters": []})
    dap.request("disconnect", {"terminateDebuggee": True})


def test_run_in_terminal_reverse_request_round_trips(dap: DapClient, tmp_path: Path) -> None:
    """console: integratedTerminal — debugpy asks the client (a reverse request) to start the
    debuggee; the client's answer, numbered by the proxy's count, goes back to debugpy under
    debugpy's own number, and the program runs to its end."""
    import subprocess

    script = tmp_path / "hello.py"
    script.write_text("print('hello from the terminal')\n")
    # a message of the proxy's own first, so its numbering and debugpy's differ
    dap.send_raw(b"Content-Length: 2\r\n\r\n{]")
    dap.event("output")
    dap.request(
        "initialize",
        {"adapterID": "tensor-dap", "supportsRunInTerminalRequest": True, "pathFormat": "path"},
    )
    dap.send("launch", {"program": str(script), "console": "integratedTerminal"})
    ask = dap.next(lambda m: m.get("type") == "request" and m.get("command") == "runInTerminal")
    arguments = ask["arguments"]
    process = subprocess.Popen(
        arguments["args"],
        cwd=arguments.get("cwd"),
        env={**os.environ, **(arguments.get("env") or {})},
    )
    dap.writer.write(
        {
            "seq": 1000,
            "type": "response",
            "request_seq": ask["seq"],
            "success": True,
            "command": "runInTerminal",
            "body": {"processId": process.pid},
        }
    )
    dap.event("initialized")
    dap.request("setExceptionBreakpoints", {"filters": []})
    dap.request("configurationDone")
    dap.event("terminated")
    assert process.wait(timeout=60) == 0


# A launch with "simulate": "cuda" runs a CUDA script unmodified on the CPU and stops on a
# device bug only the simulated GPU shows, naming cuda:0.
def test_the_debugger_stops_on_a_simulated_finding(dap: DapClient) -> None:
    script = SCRIPTS / "seed_forward.py"
    dap.start(str(script), ["device-mismatch"], simulate="cuda")
    stopped = dap.event("stopped")["body"]
    assert stopped["reason"] == "exception"
    assert stopped["text"] == "device-mismatch"
    frame = dap.top_frame(stopped["threadId"])
    assert (frame["source"]["path"], frame["line"]) == (str(script), _marked(script))
    info = dap.request("exceptionInfo", {"threadId": stopped["threadId"]})["body"]
    assert "noise is on cpu" in info["description"]
    assert "cuda:0" in info["description"]
    dap.request("disconnect", {"terminateDebuggee": True})


def test_an_unknown_simulated_device_refuses_the_launch(dap: DapClient, tmp_path: Path) -> None:
    script = tmp_path / "a.py"
    script.write_text("print(1)\n")
    dap.request("initialize", {"adapterID": "tensor-dap"})
    seq = dap.send("launch", {"program": str(script), "simulate": "tpu"})
    answer = dap.response(seq)
    assert not answer["success"]
    assert "bad simulate 'tpu'" in answer["message"]


def test_a_write_that_matters_only_once_backward_reaches_it_stops_at_that_backward(
    dap: DapClient,
) -> None:
    """inplace-saved on a graph nothing was backpropagated from yet (a VQ-VAE's EMA codebook
    written while the distances to it are alive): the stop comes at the ``backward()`` that
    reaches what was written, before its error unwinds the stack, the message naming the
    write's line; continuing lets PyTorch's own error go on."""
    script = Path(__file__).parents[1] / "engine" / "inplace_programs" / "codebook_ema.py"
    lines = script.read_text().splitlines()
    write = next(n for n, text in enumerate(lines, 1) if "# expect: inplace-saved" in text)
    dap.start(str(script), ["inplace-saved"])
    stopped = dap.event("stopped")["body"]
    assert stopped["text"] == "inplace-saved"
    frame = dap.top_frame(stopped["threadId"])
    assert (frame["source"]["path"], frame["line"]) == (
        str(script),
        lines.index("loss.backward()") + 1,
    )
    info = dap.request("exceptionInfo", {"threadId": stopped["threadId"]})["body"]
    assert info["description"].startswith(
        f"`codebook.weight.copy_(ema_weight)` (codebook_ema.py:{write}): in-place copy_ "
        "modifies codebook.weight (8, 4), which matmul saved for backward"
    )
    dap.send("continue", {"threadId": stopped["threadId"]})
    assert dap.event("exited")["body"]["exitCode"] == 1
