"""The adapter keeps serving through bad input, and leaves nothing behind when things end."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.dap.client import DapClient


@pytest.fixture
def dap():
    client = DapClient()
    yield client
    client.close()


def write(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return False


def test_malformed_message_is_answered_and_the_session_goes_on(dap: DapClient) -> None:
    body = b'{"seq": 1, "type": "request", "command": '
    dap.send_raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    note = dap.event("output")["body"]
    assert note["category"] == "important" and "not JSON" in note["output"]
    init = dap.request("initialize", {"adapterID": "tensor-dap"})
    assert init["success"]


def test_unknown_command_and_wrong_state_get_error_responses(dap: DapClient) -> None:
    dap.request("initialize", {"adapterID": "tensor-dap"})
    unknown = dap.request("bogusCommand", {})
    assert unknown["success"] is False and unknown["message"]
    early = dap.request("threads", {})
    # debugpy answers a request it cannot serve yet; either way the adapter is alive
    assert early["type"] == "response"
    assert dap.request("initialize", {"adapterID": "again"})["type"] == "response"


def test_launch_without_program_is_refused(dap: DapClient) -> None:
    dap.request("initialize", {"adapterID": "tensor-dap"})
    refused = dap.request("launch", {"console": "internalConsole"})
    assert refused["success"] is False and "program" in refused["message"]


def test_unknown_tensor_breakpoint_is_refused(dap: DapClient, tmp_path: Path) -> None:
    script = write(tmp_path, "ok.py", "print('hi')\n")
    dap.request("initialize", {"adapterID": "tensor-dap"})
    refused = dap.request("launch", {"program": script, "tensorBreakpoints": ["no-such-rule"]})
    assert refused["success"] is False and "unknown rule" in refused["message"]


def test_debuggee_that_crashes_ends_the_session(dap: DapClient, tmp_path: Path) -> None:
    script = write(tmp_path, "crash.py", "raise SystemError('boom')\n")
    dap.start(script, [])
    exited = dap.event("exited")["body"]
    assert exited["exitCode"] == 1
    dap.event("terminated")


def test_debuggee_calling_os_exit(dap: DapClient, tmp_path: Path) -> None:
    script = write(tmp_path, "hard.py", "import os\nos._exit(3)\n")
    dap.start(script, [])
    assert dap.event("exited")["body"]["exitCode"] == 3
    dap.event("terminated")


def test_client_vanishing_leaves_no_process_behind(tmp_path: Path) -> None:
    script = write(
        tmp_path,
        "forever.py",
        """
        import time
        while True:
            time.sleep(0.1)
        """,
    )
    client = DapClient()
    client.start(script, [])
    debuggee = client.event("process")["body"]["systemProcessId"]
    assert alive(debuggee)
    client.process.stdin.close()  # the editor is gone
    client.process.wait(timeout=30)
    deadline = time.time() + 20
    while alive(debuggee) and time.time() < deadline:
        time.sleep(0.2)
    assert not alive(debuggee)


def test_empty_tensor_breakpoints_mean_no_rule(dap: DapClient, tmp_path: Path) -> None:
    script = write(
        tmp_path, "bcast.py", "import torch\ny = torch.ones(4) - torch.ones(4, 1)\nprint('ran')\n"
    )
    dap.start(script, [], tensorBreakpoints=[])
    assert dap.event("exited")["body"]["exitCode"] == 0
    assert not any(m.get("event") == "stopped" for m in dap.seen), (
        "an empty tensorBreakpoints list must not enable the default rules"
    )


def test_uncaught_exception_breakpoint_pauses_where_it_crashed(dap: DapClient, tmp_path: Path):
    script = write(tmp_path, "crash2.py", "x = 1\nraise ValueError('boom here')\n")
    dap.start(script, ["uncaught"])
    stopped = dap.event("stopped")["body"]
    assert stopped["reason"] == "exception"
    frame = dap.top_frame(stopped["threadId"])
    assert (frame["source"]["path"], frame["line"]) == (script, 2)
    info = dap.request("exceptionInfo", {"threadId": stopped["threadId"]})["body"]
    assert info["exceptionId"].endswith("ValueError") and "boom here" in info["description"]
    dap.send("continue", {"threadId": stopped["threadId"]})
    assert dap.event("exited")["body"]["exitCode"] == 1


def test_a_user_exception_that_looks_like_a_rule_stays_the_users(dap: DapClient, tmp_path: Path):
    script = write(tmp_path, "mimic.py", "raise ValueError('[device-mismatch] my own message')\n")
    dap.start(script, ["raised"])
    stopped = dap.event("stopped")["body"]
    assert stopped.get("text") != "device-mismatch"
    info = dap.request("exceptionInfo", {"threadId": stopped["threadId"]})["body"]
    assert info["exceptionId"].endswith("ValueError")


def test_relative_program_without_cwd(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "rel.py", "print('relative ok')\n")
    client = DapClient([sys.executable, "-m", "tensor_dap", "adapter"], cwd=str(tmp_path))
    try:
        client.start("sub/rel.py", [])
        assert client.event("exited")["body"]["exitCode"] == 0
        outputs = "".join(
            m["body"].get("output", "") for m in client.seen if m.get("event") == "output"
        )
        assert "relative ok" in outputs
    finally:
        client.close()


def test_interpreter_without_tensor_dap_is_refused_with_the_fix(
    dap: DapClient, tmp_path: Path
) -> None:
    script = write(tmp_path, "ok.py", "print('hi')\n")
    dap.request("initialize", {"adapterID": "tensor-dap"})
    # -I -S: no site-packages, no current folder on sys.path — an interpreter without tensor_dap
    python = [sys.executable, "-I", "-S"]
    refused = dap.request("launch", {"program": script, "python": python})
    assert refused["success"] is False
    assert "tensor-dap is not installed" in refused["message"]
    assert "-m pip install tensor-dap" in refused["message"]
    missing = dap.request("launch", {"program": script, "python": str(tmp_path / "no-python")})
    assert missing["success"] is False and "not found" in missing["message"]


def test_string_args_are_split_like_a_shell_would(dap: DapClient, tmp_path: Path) -> None:
    script = write(tmp_path, "argv.py", "import sys\nprint('ARGV', sys.argv[1:])\n")
    dap.start(script, [], args='--name "my run" -v', python=sys.executable)
    printed = ""
    while "\n" not in printed.partition("ARGV")[2]:  # stdout may come in several events
        printed += dap.next(lambda m: m.get("event") == "output")["body"].get("output", "")
    assert "ARGV ['--name', 'my run', '-v']" in printed
    dap.event("terminated")
