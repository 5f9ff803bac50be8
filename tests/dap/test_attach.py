"""Attach: ``tensor-dap run --listen`` starts a program under debugpy and the tensor agent; a DAP
client attaches through ``tensor-dap adapter`` and gets the same tensor breakpoints as with
launch. Real processes throughout."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from tensor_dap.channel_protocol import agent_folders, find_agent
from tests.dap.client import DapClient

SCRIPT = """\
import time
import torch
from tensor_dap.testing import pick_device

device = pick_device()
for step in range(20):
    time.sleep(0.05)
mask = torch.tensor([0, 1, 0, 1, 1, 0], dtype=torch.bool, device=device)
source = torch.tensor([1.0, 2.0, 3.0], device=device)
y = torch.zeros(6)
y.masked_scatter_(mask, source)
print("done")
"""
MISMATCH_LINE = 11


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def find_agent_path(pid: int) -> Optional[str]:
    for folder in agent_folders():
        candidate = os.path.join(folder, f"agent-{pid}.json")
        if os.path.exists(candidate):
            return candidate
    return None


def _agent_of(process: subprocess.Popen, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        config = find_agent(process.pid)
        if config is not None:
            return config
        assert process.poll() is None, process.communicate()
        time.sleep(0.1)
    raise AssertionError("the agent never published its address")


def run_listening(script: Path, *options: str) -> tuple[subprocess.Popen, int]:
    """``tensor-dap run --listen 127.0.0.1:PORT --wait [options] script``, and its port."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tensor_dap", "run", "--listen", f"127.0.0.1:{port}", "--wait"]
        + [*options, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    return process, port


LAUNCHERS = {
    "python -m tensor_dap": [sys.executable, "-m", "tensor_dap"],
    # the console script: debugpy then appends a note to the exception's name
    "tensor-dap": [str(Path(sys.executable).with_name("tensor-dap"))],
}


@pytest.fixture(params=["python -m tensor_dap"])
def program(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[subprocess.Popen, int, Path]]:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    port = _free_port()
    process = subprocess.Popen(
        [*LAUNCHERS[request.param], "run", "--listen", f"127.0.0.1:{port}", "--wait"]
        + [str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield process, port, script
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=15)


def _attach(dap: DapClient, port: int, filters: list[str], **attach: Any) -> None:
    dap.request(
        "initialize", {"clientID": "pytest", "adapterID": "tensor-dap", "linesStartAt1": True}
    )
    dap.send("attach", {"connect": {"host": "127.0.0.1", "port": port}, **attach})
    dap.event("initialized")
    dap.request("setExceptionBreakpoints", {"filters": filters})
    dap.request("configurationDone")


@pytest.mark.parametrize(
    ("program", "how"),
    [
        ("python -m tensor_dap", "checkbox"),
        ("python -m tensor_dap", "tensorBreakpoints"),
        ("tensor-dap", "tensorBreakpoints"),
    ],
    indirect=["program"],
)
def test_attach_stops_on_a_tensor_breakpoint(program, how: str) -> None:
    process, port, script = program
    config = _agent_of(process)
    path = Path(find_agent_path(process.pid))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert config["host"] == "127.0.0.1"
    dap = DapClient()
    try:
        if how == "checkbox":
            _attach(dap, port, ["device-mismatch"])
        else:
            _attach(dap, port, [], tensorBreakpoints=["device-mismatch"])
        stopped = dap.event("stopped")["body"]
        assert stopped["reason"] == "exception"
        assert stopped["text"] == "device-mismatch"
        frame = dap.top_frame(stopped["threadId"])
        assert (Path(frame["source"]["path"]).resolve(), frame["line"]) == (
            script.resolve(),
            MISMATCH_LINE,
        )
        info = dap.request("exceptionInfo", {"threadId": stopped["threadId"]})["body"]
        assert info["exceptionId"] == "device-mismatch"
        assert info["description"].startswith("`")  # the rule's message, no debugpy note
        dap.send("continue", {"threadId": stopped["threadId"]})
        dap.event("terminated")
    finally:
        dap.close()
    process.wait(timeout=30)
    assert not path.exists()  # removed at exit


def test_agent_refuses_a_wrong_token(program) -> None:
    process, _port, _script = program
    config = _agent_of(process)
    with socket.create_connection((config["host"], config["port"]), timeout=10) as wrong:
        wrong.sendall(json.dumps({"token": "0" * len(config["token"])}).encode() + b"\n")
        assert wrong.recv(100) == b""  # closed on us
    with socket.create_connection((config["host"], config["port"]), timeout=10) as wrong:
        wrong.sendall(b"not json\n")
        assert wrong.recv(100) == b""
    assert process.poll() is None  # the program is unharmed, still waiting for its debugger


def test_run_refuses_a_remote_address_by_default(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text("pass\n")
    result = subprocess.run(
        [sys.executable, "-m", "tensor_dap", "run", "--listen", "0.0.0.0:5678", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--allow-remote" in result.stderr
