"""``"subProcess": true``: tensor breakpoints in the processes the program starts. The adapter
launches torchrun (``module: torch.distributed.run``) running the two-rank DDP sample (CUDA
code: ``"simulate": "cuda"``, each rank its own simulated device); debugpy
follows each rank and asks the client to attach to it (``debugpyAttach``), as VS Code does,
through a second ``tensor-dap adapter``. Only rank 1 stops, on its line, saying it is rank 1;
rank 0 waits at its next collective meanwhile; continuing ends the whole job."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import SAMPLES
from tests.dap.client import DapClient
from tests.multiprocess.helpers import process_markers

DDP = SAMPLES / "ddp_rank_mismatch.py"
LOADER = SAMPLES / "dataloader_worker_collate.py"
INITIALIZE = {
    "clientID": "pytest",
    "adapterID": "tensor-dap",
    "linesStartAt1": True,
    "columnsStartAt1": True,
    "pathFormat": "path",
}


@pytest.fixture
def clients() -> Iterator[list[DapClient]]:
    opened: list[DapClient] = []
    yield opened
    for client in reversed(opened):
        client.close()


def _attach_child(event: dict[str, Any], clients: list[DapClient]) -> DapClient:
    """What VS Code does on ``debugpyAttach``: a new session attached to that subprocess."""
    child = DapClient()
    clients.append(child)
    child.request("initialize", INITIALIZE)
    child.send("attach", event["body"])
    child.event("initialized")
    child.request("setExceptionBreakpoints", {"filters": []})
    child.request("configurationDone")
    return child


def _first_stop(children: list[DapClient], timeout: float) -> tuple[DapClient, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in children:
            try:
                return child, child.event("stopped", timeout=0.5)
            except queue.Empty:
                continue
    raise AssertionError("no subprocess stopped")


def test_a_rank_stops_on_its_line_and_says_which_rank(clients: list[DapClient], tmp_path) -> None:
    [(rule, line, _)] = process_markers(DDP)
    parent = DapClient()
    clients.append(parent)
    parent.request("initialize", INITIALIZE)
    parent.send(
        "launch",
        {
            "module": "torch.distributed.run",
            "args": ["--standalone", "--nproc_per_node", "2", str(DDP)],
            "cwd": str(tmp_path),
            "console": "internalConsole",
            "subProcess": True,
            "tensorBreakpoints": [rule],
            "simulate": "cuda",  # the sample is CUDA code; no GPU here
        },
    )
    parent.event("initialized")
    parent.request("setExceptionBreakpoints", {"filters": []})
    parent.request("configurationDone")
    children = [_attach_child(parent.event("debugpyAttach", timeout=120), clients)]
    children.append(_attach_child(parent.event("debugpyAttach", timeout=120), clients))

    child, stopped = _first_stop(children, timeout=180)
    body = stopped["body"]
    assert body["reason"] == "exception" and body["text"] == rule
    assert body["description"].startswith(f"Paused on {rule}: [rank 1] `running + batch_loss`")
    frame = child.top_frame(body["threadId"])
    assert (frame["source"]["path"], frame["line"]) == (str(DDP), line)
    info = child.request("exceptionInfo", {"threadId": body["threadId"]})["body"]
    assert info["exceptionId"] == rule
    assert info["description"].startswith("[rank 1] `running + batch_loss`: running is on cpu")
    assert "batch_loss is on cuda:1" in info["description"]
    other = next(c for c in children if c is not child)
    with pytest.raises(queue.Empty):
        other.event("stopped", timeout=1)  # rank 0 is not stopped by a tensor breakpoint

    child.send("continue", {"threadId": body["threadId"]})  # once per line: no second stop
    for session in children:
        session.event("terminated", timeout=120)
    parent.event("terminated", timeout=120)
    exited = parent.next(lambda m: m.get("event") == "exited", timeout=5)
    assert exited["body"]["exitCode"] == 0  # the job finished as it does without a debugger


def test_forked_dataloader_workers_stop_each_as_itself(clients: list[DapClient]) -> None:
    """DataLoader workers forked from the debuggee keep its watch, reconnect, and each stops at
    the collate line, labelled with its worker id; the parent is never stopped."""
    [(rule, line, _)] = process_markers(LOADER)
    parent = DapClient()
    clients.append(parent)
    parent.start(
        str(LOADER), [], args=["--start-method", "fork"], subProcess=True, tensorBreakpoints=[rule]
    )
    children: list[DapClient] = []
    labels = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            event = parent.next(
                lambda m: m.get("event") in ("debugpyAttach", "terminated", "stopped"), timeout=0.5
            )
        except queue.Empty:
            event = {}
        assert event.get("event") != "stopped", event
        if event.get("event") == "terminated":
            break
        if event.get("event") == "debugpyAttach":
            children.append(_attach_child(event, clients))
        for child in children:
            try:
                body = child.event("stopped", timeout=0.1)["body"]
            except queue.Empty:
                continue
            assert child.top_frame(body["threadId"])["line"] == line
            labels.append(body["description"].split("] ")[0] + "]")
            child.send("continue", {"threadId": body["threadId"]})
    assert sorted(labels) == [f"Paused on {rule}: [worker 0]", f"Paused on {rule}: [worker 1]"]


@pytest.mark.parametrize(("rank", "stops"), [("1", True), ("0", False)])
def test_tensor_ranks_limit_tensor_breakpoints(
    clients: list[DapClient], tmp_path, rank: str, stops: bool
) -> None:
    """``tensorRanks: [1]``: the ticked rules stop only in rank 1 (RANK as torchrun sets it)."""
    script = tmp_path / "ranked.py"
    script.write_text("import torch\ny = torch.ones(4) - torch.ones(4, 1)\nprint('done')\n")
    client = DapClient()
    clients.append(client)
    client.start(str(script), ["broadcast"], env={"RANK": rank}, tensorRanks=[1])
    if stops:
        stopped = client.event("stopped")["body"]
        assert stopped["text"] == "broadcast"
        assert client.top_frame(stopped["threadId"])["line"] == 2
        client.send("continue", {"threadId": stopped["threadId"]})
    client.event("terminated")
    assert not [m for m in client.seen if m.get("event") == "stopped"]  # no other stop


def test_bad_tensor_ranks_are_refused(clients: list[DapClient], tmp_path) -> None:
    client = DapClient()
    clients.append(client)
    client.request("initialize", INITIALIZE)
    response = client.request(
        "launch", {"program": str(tmp_path / "x.py"), "tensorRanks": ["one"]}, timeout=30
    )
    assert not response["success"] and "bad tensorRanks" in response["message"]
