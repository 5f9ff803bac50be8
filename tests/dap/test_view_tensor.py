"""The data path of the VS Code extension's "View Tensor": paused at a line breakpoint under
``tensor-dap adapter``, the extension sends the DAP ``evaluate`` below (context ``clipboard``,
``format: {rawString: true}``) and gets the whole JSON payload back, unquoted and untruncated,
while the tensor's version counter, ``requires_grad`` and ``grad_fn`` stay as they were."""

from __future__ import annotations

import base64
import json
import struct
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SAMPLES
from tests.dap.client import DapClient

SCRIPT = """\
import torch

torch.manual_seed(0)
w = torch.randn(300, 400, requires_grad=True)
h = (w * 2).tanh()
img = torch.rand(2, 3, 32, 48)
full = torch.arange(65536.0).reshape(256, 256)
odd = torch.tensor([[0.0, 1.0], [float("nan"), float("inf")]])
print("done")  # @stop
"""


def view_tensor_expression(evaluate_name: str) -> str:
    """What vscode-extension/src/views/fetch.ts sends for a variable's ``evaluateName``."""
    return f"__import__('tensor_dap.render.picture', fromlist=['encode']).encode(({evaluate_name}))"


def stop_line(text: str, marker: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if f"# @{marker}" in line)


@pytest.fixture
def paused(tmp_path: Path):
    script = tmp_path / "view.py"
    script.write_text(SCRIPT)
    dap = DapClient()
    # the launch arguments the extension's configuration provider sends
    dap.start(
        str(script),
        [],
        breakpoints={str(script): [stop_line(SCRIPT, "stop")]},
        python=sys.executable,
        justMyCode=True,
        tensorBreakpoints=["default"],
    )
    stopped = dap.event("stopped", timeout=120)["body"]
    frame = dap.top_frame(stopped["threadId"])
    yield dap, frame["id"]
    dap.request("disconnect", {"terminateDebuggee": True})
    dap.close()


def evaluate(dap: DapClient, frame_id: int, expression: str, **extra: Any) -> dict[str, Any]:
    response = dap.request(
        "evaluate", {"expression": expression, "frameId": frame_id, **extra}, timeout=120
    )
    assert response["success"], response
    return response["body"]


def fetch(dap: DapClient, frame_id: int, name: str) -> tuple[dict[str, Any], str]:
    body = evaluate(
        dap,
        frame_id,
        view_tensor_expression(name),
        context="clipboard",
        format={"rawString": True},
    )
    return json.loads(body["result"]), body["result"]


def decode(data: dict[str, Any]) -> list[float]:
    raw = base64.b64decode(data["values"])
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def autograd_state(dap: DapClient, frame_id: int) -> str:
    # the node's type and sequence number: before torch 2.13 its Python object (and the address
    # its repr shows) is made anew each time nothing holds it
    expression = (
        "[(t._version, t.requires_grad, t.is_leaf, type(t.grad_fn).__name__,"
        " t.grad_fn and t.grad_fn._sequence_nr()) for t in (w, h, img)]"
    )
    return evaluate(dap, frame_id, expression, context="repl")["result"]


def test_view_tensor_payload_over_dap(paused: tuple[DapClient, int]) -> None:
    dap, frame_id = paused
    before = autograd_state(dap, frame_id)
    assert "TanhBackward0" in before

    w, _ = fetch(dap, frame_id, "w")
    assert (w["shape"], w["dtype"], w["device"], w["kind"]) == (
        [300, 400],
        "float32",
        "cpu",
        "heatmap",
    )
    assert w["height"] * w["width"] <= 65536 < 300 * 400
    assert len(decode(w)) == w["height"] * w["width"]
    assert sum(w["histogram"]["counts"]) == 300 * 400
    assert w["min"] < 0 < w["max"]

    img, _ = fetch(dap, frame_id, "img")
    assert (img["kind"], img["layout"], img["slice"]) == ("image", "chw", "[0, :, :, :]")
    assert (img["height"], img["width"], img["channels"]) == (32, 48, 3)

    # the largest payload (65,536 float32 values, ~350 KB of JSON) arrives whole
    full, text = fetch(dap, frame_id, "full")
    assert len(text) > 340_000
    assert (full["height"], full["width"], full["block"]) == (256, 256, [1, 1])
    values = decode(full)
    assert values[:3] == [0.0, 1.0, 2.0] and values[-1] == 65535.0

    odd, _ = fetch(dap, frame_id, "odd")
    assert (odd["nan"], odd["posinf"], odd["neginf"]) == (1, 1, 0)
    assert sum(odd["histogram"]["counts"]) == 2

    # an expression, as VS Code's evaluateName of a child would be
    row, _ = fetch(dap, frame_id, "h[0]")
    assert (row["shape"], row["height"], row["width"]) == ([400], 1, 400)

    assert autograd_state(dap, frame_id) == before


def test_unknown_names_and_non_tensors_answer_clearly(paused: tuple[DapClient, int]) -> None:
    dap, frame_id = paused
    response = dap.request(
        "evaluate",
        {
            "expression": view_tensor_expression("nope"),
            "frameId": frame_id,
            "context": "clipboard",
        },
    )
    assert not response["success"] or "NameError" in response["body"]["result"]
    data, _ = fetch(dap, frame_id, "torch")
    assert data["error"] == "not a tensor: module"


def test_view_tensor_at_a_tensor_breakpoint_fires_no_rule() -> None:
    """Paused by leaves-device on a (simulated) CUDA tensor: drawing it copies a few values to
    the host (under no_grad, torch functions off), which must not trip the rule again."""
    script = SAMPLES / "leaves_device.py"
    dap = DapClient()
    try:
        dap.start(
            str(script),
            [],
            tensorBreakpoints=["leaves-device"],
            python=sys.executable,
            simulate="cuda",
        )
        stopped = dap.event("stopped", timeout=120)["body"]
        assert stopped["text"] == "leaves-device"
        frame_id = dap.top_frame(stopped["threadId"])["id"]
        out, _ = fetch(dap, frame_id, "out")
        assert out["shape"] == [128, 4] and out["device"] == "cuda:0"
        assert sum(out["histogram"]["counts"]) == 128 * 4
        weight, _ = fetch(dap, frame_id, "model[0].weight")
        assert weight["shape"] == [32, 16]
        time.sleep(1.0)
        dap.request("threads")  # collects what arrived meanwhile into dap.seen
        assert not [m for m in dap.seen if m.get("event") == "stopped"]
    finally:
        dap.request("disconnect", {"terminateDebuggee": True})
        dap.close()
