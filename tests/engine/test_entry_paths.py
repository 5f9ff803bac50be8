"""device-mismatch judges a tensor by what it is at the op, however it was made: accelerator
tensors that enter without an op the watch saw (a tensor subclass's constructor, an unpickled
object) are compared like any other, also when the backend comes up after the watch started
and the op was already planned on CPU tensors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.test_check_cli import write

_HEAD = """
import torch
torch.zeros(6) + torch.ones(6)        # Tensor.__add__ planned while the program is CPU-only
from tensor_dap.testing.standin import AcceleratorTensor, accelerator_device
accelerator_device()                  # the backend comes up after the watch started
"""


@pytest.mark.parametrize(
    "make",
    [
        "v = AcceleratorTensor(torch.ones(6))  # the subclass constructor: no torch op",
        "import pickle\nv = pickle.loads(pickle.dumps(AcceleratorTensor(torch.ones(6))))",
    ],
    ids=["constructor", "unpickled"],
)
def test_accelerator_tensor_made_without_an_op_is_compared(
    tmp_path: Path, check, make: str
) -> None:
    script = write(tmp_path, "entry.py", _HEAD + make + "\ntotal = torch.zeros(6) + v\n")
    run = check(script, rules="device-mismatch")
    lines = script.read_text().splitlines()
    findings = run.report["findings"]
    assert [(f["rule"], lines[f["line"] - 1]) for f in findings] == [
        ("device-mismatch", "total = torch.zeros(6) + v")
    ], run.stderr
    assert "v is on accel:0" in findings[0]["message"]
