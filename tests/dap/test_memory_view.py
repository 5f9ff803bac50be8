"""The memory view while paused, over the real adapter: ``evaluate`` of ``tensor-dap memory``
(the table, expandable per device -> line -> holders) and ``tensorMemory`` (the same as JSON,
VS Code's Tensor Memory view). One debug session for the module: the tests run in order, the
last one continues and checks that nothing the view looked at was kept alive."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.dap.client import DapClient

SCRIPT = """\
import gc
import weakref

import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(256, 128)
        self.register_buffer("scale", torch.ones(128))

    def forward(self, x):
        return self.fc(x)


def warm_up(model, optimizer):
    model(torch.zeros(4, 256)).sum().backward()
    optimizer.step()


def train(model, optimizer):
    x = torch.randn(64, 256)  # @x
    first_rows = x[:8]
    hidden = torch.tanh(model(x))  # @hidden
    loss = (torch.sigmoid(hidden) * 2).sum()  # @sigmoid
    global probes
    probes = [weakref.ref(t) for t in (x, first_rows, hidden, loss)]
    print("paused")  # @stop
    return loss.item()


model = Net()
optimizer = torch.optim.Adam(model.parameters())
warm_up(model, optimizer)
total = train(model, optimizer)
gc.collect()
print("after")  # @after
"""

KIB = 1024


def line_of(marker: str) -> int:
    return next(n for n, text in enumerate(SCRIPT.splitlines(), 1) if f"# @{marker}" in text)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory):
    script = tmp_path_factory.mktemp("memory") / "train.py"
    script.write_text(SCRIPT)
    dap = DapClient()
    dap.start(
        str(script),
        [],
        breakpoints={str(script): [line_of("stop"), line_of("after")]},
        python=sys.executable,
        justMyCode=True,
        tensorBreakpoints=["default"],
    )
    stopped = dap.event("stopped", timeout=120)["body"]
    frame = dap.top_frame(stopped["threadId"])
    assert frame["line"] == line_of("stop")
    yield dap, frame["id"], stopped["threadId"], script
    dap.request("disconnect", {"terminateDebuggee": True})
    dap.close()


def snapshot(dap: DapClient, arguments: dict[str, Any]) -> dict[str, Any]:
    response = dap.request("tensorMemory", arguments, timeout=120)
    assert response["success"], response
    assert response["command"] == "tensorMemory"
    return response["body"]


def rows(body: dict[str, Any], device: str = "cpu") -> list[dict[str, Any]]:
    (found,) = [d for d in body["devices"] if d["device"] == device]
    assert found["bytes"] == sum(r["bytes"] for r in found["lines"])
    return found["lines"]


def at(lines: list[dict[str, Any]], script: Path, marker: str, op: str) -> dict[str, Any]:
    (row,) = [
        r
        for r in lines
        if r["path"] == str(script) and r["line"] == line_of(marker) and op in r["op"]
    ]
    return row


def holders(row: dict[str, Any]) -> dict[str, str]:
    return {h["name"]: h["kind"] for h in row["holders"]}


def test_lines_bytes_counts_and_holders(session) -> None:
    dap, frame, _, script = session
    lines = rows(snapshot(dap, {"frameId": frame}))

    x = at(lines, script, "x", "randn")  # the view first_rows shares x's storage: counted once
    assert (x["op"], x["bytes"], x["count"]) == ("randn", 64 * KIB, 1)
    named = holders(x)
    assert named["x in frame train"] == "local"
    assert named["first_rows in frame train"] == "local"
    assert named["saved by AddmmBackward0 for hidden in frame train"] == "graph"

    hidden = at(lines, script, "hidden", "tanh")  # model(x) itself is freed: tanh saved its result
    assert (hidden["op"], hidden["bytes"], hidden["count"]) == ("tanh", 32 * KIB, 1)
    assert holders(hidden) == {
        "hidden in frame train": "local",
        "saved by TanhBackward0 for hidden in frame train": "graph",
        # sigmoid's graph reaches tanh's node, already walked from hidden
    }

    # no variable holds sigmoid's result: only the graph of loss
    sigmoid = at(lines, script, "sigmoid", "sigmoid")
    assert (sigmoid["bytes"], sigmoid["count"]) == (32 * KIB, 1)
    assert holders(sigmoid) == {"saved by SigmoidBackward0 for loss in frame train": "graph"}

    everyone = {h["name"]: (h["kind"], h["bytes"]) for r in lines for h in r["holders"]}
    assert everyone["model.fc.weight"] == ("parameter", 128 * KIB)
    assert everyone["model.fc.weight.grad"] == ("grad", 128 * KIB)
    assert everyone["model.fc.bias"] == ("parameter", 512)
    assert everyone["model.scale"] == ("buffer", 512)
    assert everyone["optimizer.state[model.fc.weight]['exp_avg']"] == ("optimizer", 128 * KIB)
    assert everyone["optimizer.state[model.fc.weight]['exp_avg_sq']"] == ("optimizer", 128 * KIB)
    # made unwatched: by autograd's engine, inside optimizer.step()
    (grads,) = [r for r in lines if "model.fc.weight.grad" in holders(r)]
    assert (grads["line"], grads["op"], grads["count"]) == (0, "by backward()", 2)
    (state,) = [r for r in lines if "optimizer.state[model.fc.bias]['exp_avg']" in holders(r)]
    assert (state["line"], state["op"]) == (0, "by optimizer.step()")
    loss = at(lines, script, "sigmoid", "sum")
    assert (loss["bytes"], holders(loss)) == (4, {"loss in frame train": "local"})
    assert [r["bytes"] for r in lines] == sorted((r["bytes"] for r in lines), reverse=True)


def test_the_table_in_the_debug_console_expands(session) -> None:
    dap, frame, _, script = session
    response = dap.request(
        "evaluate", {"expression": "tensor-dap memory", "frameId": frame, "context": "repl"}
    )
    assert response["success"], response
    table = response["body"]["result"]
    assert f"train.py:{line_of('x')} randn" in table
    assert "64.0 KiB  x in frame train" in table
    assert "optimizer.state[model.fc.weight]['exp_avg']" in table

    reference = response["body"]["variablesReference"]
    devices = dap.request("variables", {"variablesReference": reference})
    (cpu,) = [v for v in devices["body"]["variables"] if v["name"] == "cpu"]
    assert "tensors" in cpu["value"] and cpu["variablesReference"]
    lines = dap.request("variables", {"variablesReference": cpu["variablesReference"]})
    (x,) = [v for v in lines["body"]["variables"] if v["name"].endswith(f":{line_of('x')} randn")]
    assert x["value"] == "64.0 KiB in 1 tensor"
    named = dap.request("variables", {"variablesReference": x["variablesReference"]})
    values = {v["name"]: v["value"] for v in named["body"]["variables"]}
    assert values["first_rows in frame train"] == "64.0 KiB · variable"
    assert values["saved by AddmmBackward0 for hidden in frame train"] == (
        "64.0 KiB · saved for backward"
    )


def test_without_a_frame_id_the_top_frame_of_the_last_stack(session) -> None:
    dap, _, thread, script = session
    dap.top_frame(thread)
    watch = dap.request("evaluate", {"expression": "tensor-dap memory", "context": "watch"})
    assert watch["success"], watch
    assert watch["body"]["result"].startswith("cpu ") and watch["body"]["variablesReference"]
    assert at(rows(snapshot(dap, {})), script, "x", "randn")["bytes"] == 64 * KIB


def test_nothing_is_kept_alive(session) -> None:
    dap, _, thread, _ = session
    dap.request("continue", {"threadId": thread})
    stopped = dap.event("stopped", timeout=120)["body"]
    frame = dap.top_frame(stopped["threadId"])
    assert frame["line"] == line_of("after")
    alive = dap.request(
        "evaluate",
        {
            "expression": "[p() is not None for p in probes]",
            "frameId": frame["id"],
            "context": "repl",
        },
    )
    assert alive["body"]["result"] == "[False, False, False, False]"
