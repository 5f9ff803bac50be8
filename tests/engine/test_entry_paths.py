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


def test_a_tensor_made_by_no_watched_op_says_so(tmp_path: Path, check) -> None:
    script = write(
        tmp_path,
        "inline.py",
        _HEAD + "total = torch.zeros(6) + AcceleratorTensor(torch.ones(6))\n",
    )
    [finding] = check(script, rules="device-mismatch").report["findings"]
    assert (
        "AcceleratorTensor(torch.ones(6)) is on accel:0 (created outside the watched ops)"
        in (finding["message"])
    )


def test_torch_from_dlpack_of_a_simulated_cuda_tensor(tmp_path: Path, check) -> None:
    # DLPack hands a CUDA tensor over with no op the watch sees: still compared at the op
    script = write(
        tmp_path,
        "dlpack.py",
        """
        import torch
        x = torch.ones(6, device="cuda")
        shared = torch.from_dlpack(x)
        assert shared.is_cuda and shared.data_ptr() == x.data_ptr()
        total = torch.zeros(6) + torch.from_dlpack(x)
        """,
    )
    run = check(script, rules="device-mismatch", extra=("--simulate", "cuda"))
    [finding] = run.report["findings"]
    assert finding["line"] == 6, run.stderr
    assert (
        "torch.from_dlpack(x) is on cuda:0 (created outside the watched ops)"
        in (finding["message"])
    )
    assert "Expected all tensors to be on the same device" in run.stderr
