"""``tensor_dap.watch(simulate="cuda")``: the Python API turns the simulation on before the
program's CUDA code runs, as ``tensor-dap check --simulate cuda`` does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tensor_dap

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import json
import torch
import tensor_dap

with tensor_dap.watch(rules="device-mismatch", simulate="cuda") as w:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    total = torch.zeros(3)
    x = torch.ones(3, device=device)
    try:
        total = total + x  # BUG
    except RuntimeError as error:
        raised = str(error)
print(json.dumps({
    "device": str(x.device),
    "is_cuda": x.is_cuda,
    "raised": raised,
    "findings": [[f.rule, f.line, f.message] for f in w.findings],
}))
"""


def test_watch_simulate_cuda_runs_cuda_code_on_the_cpu(tmp_path: Path) -> None:
    script = tmp_path / "api.py"
    script.write_text(textwrap.dedent(PROGRAM))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["device"], result["is_cuda"]) == ("cuda:0", True)
    assert "cpu and cuda:0" in result["raised"]
    bug = next(n for n, line in enumerate(script.read_text().splitlines(), 1) if "# BUG" in line)
    [(rule, line, message)] = result["findings"]
    assert (rule, line) == ("device-mismatch", bug)
    assert "total is on cpu" in message and "x is on cuda:0" in message


def test_watch_refuses_an_unknown_simulated_device() -> None:
    with pytest.raises(ValueError, match="cannot simulate 'tpu'"):
        tensor_dap.watch(simulate="tpu")
