"""A debug session writes the trace store while it runs, as ``tensor-dap check`` does: the
language server shows the shapes of the lines that ran while the program is paused. Launch
(the store of the run's working directory), attach to ``tensor-dap run``, and the processes the
program starts (``subProcess``) each write it; a stopped session leaves its run ended."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import pytest

from tensor_dap.tracedb import TRACE_ENV, TraceReader
from tests.dap.client import DapClient
from tests.dap.listening import attached
from tests.dap.test_subprocesses import INITIALIZE, _attach_child

SCRIPT = """\
import torch
x = torch.ones(3, 4)
y = x * 2
z = y.sum(0)
print("at the breakpoint", flush=True)
w = torch.cat([z, z])
print("done", flush=True)
"""
BREAK_LINE = 5


def _eventually(what: str, read: Callable[[], Any], timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if value:
            return value
        assert time.monotonic() < deadline, f"no {what} in the trace store"
        time.sleep(0.2)


def _shapes(store: Path, script: Path) -> dict[int, tuple[str, tuple[int, ...]]]:
    """line -> (name, shape) the store holds for ``script``."""
    if not store.exists():
        return {}
    with TraceReader(store) as reader:
        return {o.line: (o.name, o.shape) for o in reader.observations_for(str(script))}


def _latest_run(store: Path) -> Any:
    with TraceReader(store) as reader:
        return reader.latest_run()


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def test_launch_writes_the_lines_that_ran_while_paused(
    script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TRACE_ENV)  # the default place: .tensor-dap/trace.db under the cwd
    store = tmp_path / ".tensor-dap" / "trace.db"
    dap = DapClient()
    try:
        dap.start(str(script), [], {str(script): [BREAK_LINE]}, cwd=str(tmp_path))
        stopped = dap.event("stopped")["body"]
        assert stopped["reason"] == "breakpoint"
        assert dap.top_frame(stopped["threadId"])["line"] == BREAK_LINE
        # paused: the lines that ran are in the store (the flush thread is never suspended)
        seen = _eventually("rows of lines 2-4", lambda: len(_shapes(store, script)) >= 3 and 1)
        shapes = _shapes(store, script)
        assert shapes[2] == ("x", (3, 4))
        assert shapes[3] == ("y", (3, 4))
        assert shapes[4] == ("z", (4,))
        assert 6 not in shapes and seen
        run = _latest_run(store)
        assert run.command == "debug" and run.ended is None  # still going
        assert run.argv[0] == str(script)

        dap.send("continue", {"threadId": stopped["threadId"]})
        dap.event("terminated")
    finally:
        dap.close()
    assert _shapes(store, script)[6] == ("w", (8,))
    run = _latest_run(store)
    assert run.ended is not None and '"status": "ok"' in (run.exit_json or "")


def test_a_pause_writes_the_rows_at_once(script: Path, trace_store: Path) -> None:
    """The adapter tells the agents the program paused: the rows are written then, not at the
    flush thread's next tick (a second after the session began, long after this pause)."""
    dap = DapClient()
    try:
        dap.start(str(script), [], {str(script): [BREAK_LINE]})
        dap.event("stopped")
        paused = time.monotonic()
        _eventually("rows after the pause", lambda: 4 in _shapes(trace_store, script), 0.6)
        assert time.monotonic() - paused < 0.6
    finally:
        dap.close()


def test_a_stopped_session_leaves_its_run_ended(script: Path, trace_store: Path) -> None:
    """Stop while paused: debugpy kills the debuggee, the adapter records how the run ended."""
    dap = DapClient()
    try:
        dap.start(str(script), [], {str(script): [BREAK_LINE]})
        dap.event("stopped")
        _eventually("rows", lambda: _shapes(trace_store, script))
        dap.request("disconnect", {"terminateDebuggee": True})
        dap.event("terminated")
    finally:
        dap.close()
    run = _latest_run(trace_store)
    assert run.ended is not None
    assert "stopped by the debugger" in (run.exit_json or "")
    assert _shapes(trace_store, script)[4] == ("z", (4,))  # what ran stays, consistent


def test_a_finding_is_in_the_store_when_the_session_pauses_on_it(
    tmp_path: Path, trace_store: Path
) -> None:
    script = tmp_path / "bad.py"
    script.write_text("import torch\na = torch.ones(4)\nb = a - torch.ones(4, 1)\nprint(b)\n")
    dap = DapClient()
    try:
        dap.start(str(script), ["broadcast"])
        stopped = dap.event("stopped")["body"]
        assert stopped["text"] == "broadcast"
        # flushed before the pause: no waiting for the flush thread
        with TraceReader(trace_store) as reader:
            findings = reader.findings_for(str(script))
            assert [(f.rule, f.line) for f in findings] == [("broadcast", 3)]
            assert {o.line for o in reader.observations_for(str(script))} >= {2}
        dap.send("continue", {"threadId": stopped["threadId"]})
        dap.event("terminated")
    finally:
        dap.close()


def test_launch_with_trace_store_off_writes_nothing(script: Path, trace_store: Path) -> None:
    dap = DapClient()
    try:
        dap.start(str(script), [], traceStore=False)
        dap.event("terminated")
    finally:
        dap.close()
    assert not trace_store.exists()


def test_attach_to_tensor_dap_run_writes_the_store(script: Path, trace_store: Path) -> None:
    with attached(script, INITIALIZE) as dap:
        dap.request(
            "setBreakpoints",
            {"source": {"path": str(script)}, "breakpoints": [{"line": BREAK_LINE}]},
        )
        dap.request("setExceptionBreakpoints", {"filters": []})
        dap.request("configurationDone")
        stopped = dap.event("stopped", timeout=60)["body"]
        _eventually("rows while attached and paused", lambda: 4 in _shapes(trace_store, script))
        dap.send("continue", {"threadId": stopped["threadId"]})
        dap.event("terminated", timeout=60)
    assert _shapes(trace_store, script)[6] == ("w", (8,))
    run = _latest_run(trace_store)
    assert run.command == "run" and run.ended is not None


CHILD = """\
import torch
c = torch.zeros(2, 5)
d = c.t()
e = torch.ones(4) - torch.ones(4, 1)
print("child done", flush=True)
"""
PARENT = """\
import subprocess, sys
import torch
p = torch.ones(7)
subprocess.run([sys.executable, sys.argv[1]], check=True)
print("parent done", flush=True)
"""


def test_a_subprocess_writes_into_the_sessions_run(tmp_path: Path, trace_store: Path) -> None:
    child, parent = tmp_path / "child.py", tmp_path / "parent.py"
    child.write_text(CHILD)
    parent.write_text(PARENT)
    dap = DapClient()
    sessions = [dap]
    try:
        dap.start(
            str(parent), [], args=[str(child)], subProcess=True, tensorBreakpoints=["broadcast"]
        )
        session = _attach_child(dap.event("debugpyAttach", timeout=120), sessions)
        stopped = session.event("stopped", timeout=120)["body"]
        assert stopped["text"] == "broadcast"
        with TraceReader(trace_store) as reader:  # written before the child paused
            assert [(f.rule, f.line) for f in reader.findings_for(str(child))] == [("broadcast", 4)]
        session.send("continue", {"threadId": stopped["threadId"]})
        dap.event("terminated", timeout=120)
    finally:
        for session in reversed(sessions):
            session.close()
    assert _shapes(trace_store, parent)[3] == ("p", (7,))
    assert _shapes(trace_store, child)[3] == ("d", (5, 2))
    with TraceReader(trace_store) as reader:
        rows = reader.observations_for(str(child))
        run = reader.latest_run()
    assert {o.last_run_id for o in rows} == {run.run_id}  # the child joined the session's run
    assert all(o.process.startswith("pid ") for o in rows), [o.process for o in rows]
    assert run.ended is not None
