"""The rule checkboxes agree with the rules that are on, from the start of the session.

VS Code's extension starts the adapter with the launch's rules (``tensor-dap adapter --rules``):
those filters are advertised ticked (``default: true``), and what the client sends in
``setExceptionBreakpoints`` is what is on. A client that does not say (any other DAP client)
keeps the launch's ``tensorBreakpoints`` on while it sends no tensor filter."""

from __future__ import annotations

import queue
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.dap.client import DapClient

BROADCAST = "import torch\na = torch.ones(4)\nb = a - torch.ones(4, 1)\nprint('done')\n"


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "bad.py"
    path.write_text(BROADCAST)
    return path


@pytest.fixture
def opened() -> Iterator[list[DapClient]]:
    clients: list[DapClient] = []
    yield clients
    for client in clients:
        client.close()


def _adapter(opened: list[DapClient], *extra: str) -> DapClient:
    client = DapClient([sys.executable, "-m", "tensor_dap", "adapter", *extra])
    opened.append(client)
    return client


def _defaults(init: dict[str, Any]) -> dict[str, bool]:
    return {
        f["filter"]: f.get("default", False) for f in init["body"]["exceptionBreakpointFilters"]
    }


def test_the_launchs_rules_are_advertised_ticked(opened: list[DapClient]) -> None:
    told = _adapter(opened, "--rules", "broadcast,grad-lost@rank=1").request("initialize", {})
    defaults = _defaults(told)
    assert defaults["broadcast"] is True and defaults["grad-lost"] is True
    assert defaults["device-mismatch"] is False and defaults["nan-inf"] is False
    assert defaults["uncaught"] is True  # debugpy's own as debugpy says
    groups = _defaults(_adapter(opened, "--rules", "default").request("initialize", {}))
    assert groups["device-mismatch"] is True and groups["nan-inf"] is False
    untold = _defaults(_adapter(opened).request("initialize", {}))
    assert not any(untold[rule] for rule in ("broadcast", "grad-lost", "device-mismatch"))


def test_ticked_as_advertised_the_rule_stops(opened: list[DapClient], script: Path) -> None:
    """What VS Code sends for a checkbox it created ticked: the rule is on."""
    dap = _adapter(opened, "--rules", "broadcast")
    dap.start(str(script), ["uncaught", "broadcast"], tensorBreakpoints=["broadcast"])
    stopped = dap.event("stopped")["body"]
    assert stopped["text"] == "broadcast"
    assert dap.top_frame(stopped["threadId"])["line"] == 3
    dap.send("continue", {"threadId": stopped["threadId"]})
    dap.event("terminated")


def test_a_checkbox_left_unticked_turns_the_rule_off_and_says_so(
    opened: list[DapClient], script: Path
) -> None:
    """The residual case: VS Code reuses a checkbox the user unticked in an earlier session.
    The view shows it off, so it is off, and the debug console says why."""
    dap = _adapter(opened, "--rules", "broadcast")
    dap.start(str(script), ["uncaught"], tensorBreakpoints=["broadcast"])
    dap.event("terminated")
    assert not [m for m in dap.seen if m.get("event") == "stopped"]
    said = "".join(m["body"]["output"] for m in dap.seen if m.get("event") == "output")
    assert "the launch configuration turns on broadcast, but its checkbox" in said


def test_unticking_and_ticking_keep_working(opened: list[DapClient], tmp_path: Path) -> None:
    """Told the rules, the client's later requests still switch them, while the program runs."""
    script = tmp_path / "twice.py"
    script.write_text(
        "import time, torch\n"
        "a = torch.ones(4)\n"
        "b = a - torch.ones(4, 1)\n"
        "time.sleep(1.5)\n"
        "c = a - torch.ones(4, 1)\n"
        "print('done')\n"
    )
    dap = _adapter(opened, "--rules", "broadcast")
    dap.start(str(script), ["broadcast"], tensorBreakpoints=["broadcast"])
    stopped = dap.event("stopped")["body"]
    assert dap.top_frame(stopped["threadId"])["line"] == 3
    dap.request("setExceptionBreakpoints", {"filters": []})  # unticked: line 5 does not stop
    dap.send("continue", {"threadId": stopped["threadId"]})
    dap.event("terminated")
    assert not [m for m in dap.seen if m.get("event") == "stopped"]


def test_other_clients_keep_the_launchs_rules(opened: list[DapClient], script: Path) -> None:
    """Not told (no ``--rules``): the launch's tensorBreakpoints stay on though the client sends
    no tensor filter, as before."""
    dap = _adapter(opened)
    dap.start(str(script), [], tensorBreakpoints=["broadcast"])
    assert dap.event("stopped")["body"]["text"] == "broadcast"
    with pytest.raises(queue.Empty):
        dap.next(lambda m: m.get("event") == "output" and "unticked" in str(m), timeout=0.5)
