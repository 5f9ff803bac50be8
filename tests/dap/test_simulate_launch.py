"""A launch with ``"simulate": "cuda"`` runs a CUDA script unmodified on the CPU and stops the
debugger on a device bug only the simulated GPU shows, naming ``cuda:0``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dap.client import DapClient
from tests.simulate.test_simulate_cuda import SCRIPTS, _marked


@pytest.fixture
def dap():
    client = DapClient()
    yield client
    client.close()


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
