"""Every sample_project scenario through the real ``tensor-dap check``: right rule, right line,
a message naming the tensors and where they came from — and the clean scripts give nothing.

The samples are CUDA code; here, without a GPU, they run as a user runs them on a laptop:
``tensor-dap check --simulate cuda``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import (
    CLEAN_SCRIPTS,
    SAMPLES,
    SIMULATE_CUDA,
    expected_findings,
    script_options,
    script_rules,
)

BUG_SCRIPTS = sorted(p for p in SAMPLES.glob("*.py") if expected_findings(p))
CLEAN = sorted(CLEAN_SCRIPTS.glob("*.py")) + [SAMPLES / "clean_training.py"]


@pytest.fixture
def check_sample(check):
    """``tensor-dap check --simulate cuda SAMPLE``."""

    def runner(script: Path, **kwargs):
        return check(script, extra=SIMULATE_CUDA, **kwargs)

    return runner


@pytest.mark.parametrize("script", BUG_SCRIPTS, ids=lambda p: p.stem)
def test_bug_script_reports_exactly_its_marked_lines(script: Path, check, engine_path) -> None:
    extra = SIMULATE_CUDA + script_options(script)
    run = check(script, rules=script_rules(script), extra=extra, env=engine_path)
    assert run.pairs() == expected_findings(script), run.stderr[-3000:]
    assert run.returncode == 1
    assert run.report["simulated"] == "cuda"
    for finding in run.findings:
        assert finding["path"] == str(script)
        assert finding["message"].startswith("`")
        # the human-readable line on stderr: file:line rule message
        assert f"{script.name}:{finding['line']} {finding['rule']}" in run.stderr


@pytest.mark.parametrize("script", CLEAN, ids=lambda p: p.stem)
def test_clean_script_gives_no_findings(script: Path, check) -> None:
    run = check(script, extra=SIMULATE_CUDA if script.parent == SAMPLES else ())
    assert run.findings == [], run.stderr[-3000:]
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.report["exit"]["status"] == "ok"


def test_masked_scatter_message_names_operands_and_origin(check_sample) -> None:
    run = check_sample(SAMPLES / "masked_scatter_on_cpu.py")
    message = run.finding("device-mismatch")["message"]
    assert message.startswith("`y.masked_scatter_(mask, x)`: y is on cpu (created at ")
    assert "masked_scatter_on_cpu.py:16 by zeros)" in message
    assert "mask is on cuda:0" in message and "x is on cuda:0" in message
    assert "Create y with device=device." in message
    tensors = {t["name"]: t for t in run.finding("device-mismatch")["tensors"]}
    assert tensors["y"]["device"] == "cpu" and tensors["y"]["shape"] == [6]
    assert tensors["y"]["origin"]["line"] == 16 and tensors["y"]["origin"]["op"] == "zeros"


def test_loss_accumulator_names_the_cpu_accumulator(check_sample) -> None:
    run = check_sample(SAMPLES / "loss_accumulator_on_cpu.py")
    message = run.finding("device-mismatch")["message"]
    assert "loss is on cpu (created at loss_accumulator_on_cpu.py:28" in message
    assert "is on cuda:0" in message
    # the script's own error still reaches the user unchanged
    assert "Expected all tensors to be on the same device" in run.stderr


def test_grad_lost_names_the_cut(check_sample) -> None:
    run = check_sample(SAMPLES / "grad_lost_detach.py")
    message = run.finding("grad-lost")["message"]
    assert "cut at grad_lost_detach.py:24" in message and "by detach()" in message
    assert "element 0 of tensors does not require grad" in run.stderr


def test_grad_lost_without_requires_grad_lists_sources(check_sample) -> None:
    run = check_sample(SAMPLES / "grad_lost_requires_grad.py")
    message = run.finding("grad-lost")["message"]
    assert "nothing it was computed from requires grad" in message
    assert "w (created at grad_lost_requires_grad.py:14 by tensor)" in message


def test_inplace_names_the_saving_op(check_sample) -> None:
    run = check_sample(SAMPLES / "inplace_on_saved.py")
    message = run.finding("inplace-saved")["message"]
    assert "h += 1" in message and "sigmoid saved for backward" in message
    assert "inplace_on_saved.py:20" in message


def test_broadcast_names_shapes(check_sample) -> None:
    run = check_sample(SAMPLES / "silent_broadcast.py")
    message = run.finding("broadcast")["message"]
    assert "y (4,), pred (4, 1) broadcast to (4, 4)" in message


def test_missing_zero_grad_names_parameters(check_sample) -> None:
    run = check_sample(SAMPLES / "missing_zero_grad.py")
    message = run.finding("missing-zero-grad")["message"]
    assert "zero_grad() was not called" in message and "model.0.weight (32, 10)" in message


def test_leaves_device_ignores_item_logging(check_sample) -> None:
    run = check_sample(SAMPLES / "leaves_device.py")
    assert [f["rule"] for f in run.findings] == ["leaves-device"]
    assert "leaves cuda:0 for the CPU" in run.finding("leaves-device")["message"]


def test_nan_inf_is_opt_in(check_sample) -> None:
    script = SAMPLES / "nan_inf.py"
    assert check_sample(script).findings == []  # default rules do not read data
    run = check_sample(script, rules="nan-inf")
    assert run.pairs() == expected_findings(script)
    assert "produced" in run.finding("nan-inf")["message"]


def test_samples_are_plain_cuda_code() -> None:
    # what a user writes: no tensor-dap import, the device picked the usual CUDA ways
    for script in sorted(SAMPLES.glob("*.py")):
        assert "tensor_dap" not in script.read_text(), script
    idioms = "\n".join(p.read_text() for p in SAMPLES.glob("*.py"))
    for idiom in ('torch.device("cuda" if torch.cuda.is_available() else "cpu")', ".cuda()"):
        assert idiom in idioms


def test_without_a_gpu_or_the_simulation_the_device_bug_hides(check) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a real GPU: the sample's device bug shows without the simulation")
    run = check(SAMPLES / "loss_accumulator_on_cpu.py")
    assert run.findings == [] and run.returncode == 0, run.stderr[-3000:]
    assert "simulated" not in run.report
