"""The Variables view end to end: a real DAP client, a real debuggee paused at a breakpoint,
under plain debugpy (the ``pydevd_plugins`` extension alone) and under ``tensor-dap adapter``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.dap.client import DapClient

DEBUGGEE = """\
import torch

a = torch.randn(4, 3, requires_grad=True)
b = a @ torch.randn(3, 1)
big = torch.zeros(2000, 3000)
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
plain = [1, 2, 3]
batch = {"x": a, "y": torch.ones(2, dtype=torch.long), "n": 2}
pair = (b, "label")
batches = [(torch.ones(2, 3), torch.zeros(2, dtype=torch.long))]
print("paused")  # @stop
"""

ADAPTERS = {
    "debugpy": [sys.executable, "-m", "debugpy.adapter"],
    "tensor-dap": None,
}


@pytest.fixture(params=sorted(ADAPTERS))
def dap(request: pytest.FixtureRequest):
    client = DapClient(ADAPTERS[request.param])
    yield client
    client.close()


def _variables(dap: DapClient, reference: int) -> dict[str, dict[str, Any]]:
    body = dap.request("variables", {"variablesReference": reference})["body"]
    return {v["name"]: v for v in body["variables"]}


def _paused_locals(dap: DapClient, tmp_path: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    script = tmp_path / "debuggee.py"
    script.write_text(DEBUGGEE)
    line = DEBUGGEE.splitlines().index('print("paused")  # @stop') + 1
    dap.start(str(script), [], breakpoints={str(script): [line]})
    stopped = dap.event("stopped")["body"]
    frame = dap.top_frame(stopped["threadId"])
    assert frame["line"] == line
    scopes = dap.request("scopes", {"frameId": frame["id"]})["body"]["scopes"]
    return stopped["threadId"], _variables(dap, scopes[0]["variablesReference"])


def test_variables_view_renders_tensors(dap: DapClient, tmp_path: Path) -> None:
    thread, local = _paused_locals(dap, tmp_path)
    assert local["b"]["value"] == "tensor<(4, 1) float32 cpu grad MmBackward0>"
    assert local["a"]["value"] == "tensor<(4, 3) float32 cpu grad>"
    assert local["big"]["value"] == "tensor<(2000, 3000) float32 cpu>"
    assert local["model"]["value"] == "Linear(4 params, cpu, float32, train)"
    assert local["opt"]["value"] == "SGD(1 group, 2 params, lr=0.1)"
    assert local["plain"]["value"] == "[1, 2, 3]"  # everything else as debugpy shows it
    # containers of tensors: debugpy's one-line repr, each tensor as its metadata line
    assert local["batch"]["value"] == (
        "{'x': tensor<(4, 3) float32 cpu grad>, 'y': tensor<(2,) int64 cpu>, 'n': 2}"
    )
    assert local["pair"]["value"] == "(tensor<(4, 1) float32 cpu grad MmBackward0>, 'label')"
    assert local["batches"]["value"] == "[(tensor<(2, 3) float32 cpu>, tensor<(2,) int64 cpu>)]"
    if "tensor_dap" in dap.process.args:  # our adapter: tensors carry VS Code's menu context
        assert local["b"]["__vscodeVariableMenuContext"] == "tensor"
        assert "__vscodeVariableMenuContext" not in local["plain"]

    children = _variables(dap, local["b"]["variablesReference"])
    # under tensor-dap the session watches from the start (it writes the trace store): each
    # tensor says where it was made
    ours = "tensor_dap" in dap.process.args
    assert list(children) == [
        "shape",
        "dtype",
        "device",
        "requires_grad",
        "grad_fn",
        "is_leaf",
        "grad",
        *(["created at"] if ours else []),
        "statistics",
    ]
    if ours:
        assert children["created at"]["value"] == "debuggee.py:4 by matmul"
    assert children["shape"]["value"] == "(4, 1)"
    assert children["grad_fn"]["value"] == "MmBackward0"
    assert children["grad"]["value"] == "not kept (non-leaf tensor)"
    assert children["shape"]["variablesReference"] == 0
    assert children["statistics"]["value"].startswith("expand to compute")
    assert children["shape"].get("evaluateName") == "b.shape"

    stats = _variables(dap, children["statistics"]["variablesReference"])
    assert {"min", "max", "mean", "std", "NaN", "Inf"} <= set(stats)
    big_stats = _variables(
        dap,
        _variables(dap, local["big"]["variablesReference"])["statistics"]["variablesReference"],
    )
    assert big_stats["max"]["value"] == "0"

    module = _variables(dap, local["model"]["variablesReference"])
    assert module["parameters"]["value"] == "4 (4 trainable)"
    assert module["weight"]["value"] == "tensor<(1, 3) float32 cpu grad>"
    assert "(raw)" in module

    evaluated = dap.request(
        "evaluate", {"expression": "b * 2", "context": "watch", "frameId": _frame(dap, thread)}
    )["body"]
    assert evaluated["result"] == "tensor<(4, 1) float32 cpu grad MulBackward0>"
    dap.send("continue", {"threadId": thread})
    dap.event("terminated")


def _frame(dap: DapClient, thread: int) -> int:
    return dap.top_frame(thread)["id"]
