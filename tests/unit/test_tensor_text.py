"""One spelling of a tensor and of a fix's device, loadable without torch (the language server
and the CLI use it before, or without, torch)."""

from __future__ import annotations

import subprocess
import sys

import torch

from tensor_dap.device_fix import device_in_fix
from tensor_dap.tensor_text import dtype_name, shape_text, summary_text


def test_shapes_dtypes_and_summaries() -> None:
    assert [shape_text(s) for s in ((), (6,), (64, 10), torch.Size([3, 1]))] == [
        "()",
        "(6,)",
        "(64, 10)",
        "(3, 1)",
    ]
    assert shape_text([3, "j1"]) == "(3, j1)"
    assert dtype_name(torch.float32) == "float32" and dtype_name("torch.int64") == "int64"
    assert summary_text("(4, 1)", "float32", "cpu", "AddmmBackward0", True) == (
        "tensor<(4, 1) float32 cpu grad AddmmBackward0>"
    )
    assert summary_text("(2,)", "float32", "cpu", None, True, ["sparse_coo"]) == (
        "tensor<(2,) float32 cpu sparse_coo grad>"
    )


def test_the_device_in_a_fix() -> None:
    assert device_in_fix("cuda:0", variable="device", holder="w") == "device"
    assert device_in_fix("cuda:0", holder="w") == "w.device"
    assert device_in_fix("cuda:0", holder="a * 2") == '"cuda:0"'


def test_the_language_server_and_the_text_modules_load_no_torch() -> None:
    code = (
        "import sys, tensor_dap.tensor_text, tensor_dap.device_fix, tensor_dap.lsp.server\n"
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
