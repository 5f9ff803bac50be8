"""``--simulate cuda``: CUDA scripts written the usual way run unmodified on the CPU, as on one
CUDA device named ``cuda:0``; device bugs are reported at their lines, and only under it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"
SIMULATE = ("--simulate", "cuda")


def _marked(script: Path, marker: str = "# BUG") -> int:
    lines = script.read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if line.rstrip().endswith(marker))


def _expected(script: Path) -> list[tuple[str, int]]:
    """The ``# expect: RULE`` comments of ``script``: what a real GPU run reports."""
    found = []
    for number, line in enumerate(script.read_text().splitlines(), 1):
        if "# expect: " in line:
            found.append((line.split("# expect: ")[1].split()[0], number))
    return found


def _found(run) -> list[tuple[str, int]]:
    return [(f["rule"], f["line"]) for f in run.report["findings"]]


@pytest.mark.parametrize(
    "name",
    [
        "api",
        "accelerator_api",
        "checkpoint",
        "pickling",
        "subclasses",
        "grad_checkpoint",
        "custom_backward",
        "module_moves",
        "amp",
        "amp_dtypes",
        "factories",
        "host_arguments",
        "compiled",
    ],
)
def test_clean_cuda_scripts_run_to_the_end_with_no_finding(check, name: str) -> None:
    run = check(SCRIPTS / f"{name}.py", extra=SIMULATE)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().endswith("OK")
    assert run.report["findings"] == []
    assert run.report["simulated"] == "cuda"
    assert "no findings (simulated cuda on the CPU)" in run.stderr
    assert "cuDNN" not in run.stderr  # (the RNNs of host_arguments: a GPU warns nothing)


def test_autocast_lowers_precision_as_on_a_gpu(check) -> None:
    """An AMP dtype bug PyTorch raises on a GPU is raised under the simulation, at its line."""
    script = SCRIPTS / "amp_index_put.py"
    run = check(script, extra=SIMULATE)
    assert run.returncode == 1
    assert f'amp_index_put.py", line {_marked(script)}' in run.stderr
    error = "Index put requires the source and destination dtypes match, got Float for the "
    assert error + "destination and Half for the source" in run.stderr
    plain = check(script)  # on the CPU autocast is off: the script runs
    assert plain.returncode == 0 and plain.stdout.strip().endswith("OK")


# moves, pinned: copies from cuda:0 to the host, as a GPU run reports them; errors: PyTorch's
# own error at the CPU operand (the script catches it), and the finding; workers: DataLoader
# workers and the pin-memory thread; threads: a thread the program starts simulates too
@pytest.mark.parametrize("name", ["moves", "pinned", "errors", "workers", "threads"])
def test_cuda_idioms_behave_as_on_a_gpu(check, name: str) -> None:
    script = SCRIPTS / f"{name}.py"
    run = check(script, extra=SIMULATE)
    assert run.stdout.strip().endswith("OK"), run.stderr
    assert _found(run) == _expected(script)
    assert all("cuda:0" in f["message"] for f in run.report["findings"])
    assert "accel" not in run.stderr


@pytest.mark.parametrize(
    "name",
    [
        "seed_accumulator",
        "seed_scalar_accumulator",
        "seed_forward",
        "seed_checkpoint",
        "seed_mask",
        "seed_compiled",
    ],
)
def test_seeded_device_bugs_are_found_only_under_the_simulation(check, name: str) -> None:
    script = SCRIPTS / f"{name}.py"
    simulated = check(script, extra=SIMULATE)
    assert _found(simulated) == [("device-mismatch", _marked(script))], simulated.stderr
    assert "cuda:0" in simulated.report["findings"][0]["message"]
    assert "cuda:0" in simulated.stderr and "accel" not in simulated.stderr
    plain = check(script)
    assert plain.returncode == 0, plain.stderr
    assert plain.report["findings"] == []
    assert "simulated" not in plain.report


@pytest.mark.parametrize(
    ("name", "call", "line"),
    [
        ("unsupported", "torch.cuda.Stream", 5),
        ("cuda_only_kernel", "myext::fused", 9),
        ("exported", "torch.export.export", 4),  # (it aborted the process)
    ],
)
def test_what_cannot_be_simulated_stops_with_one_line(check, name, call, line) -> None:
    script = SCRIPTS / f"{name}.py"
    run = check(script, extra=SIMULATE)
    assert run.returncode == 1
    assert "not reached" not in run.stdout
    assert "Traceback" not in run.stderr
    assert (
        f"tensor-dap --simulate cuda: {call} (at {script}:{line}) cannot be simulated" in run.stderr
    ), run.stderr


def test_trace_simulates_too(tmp_path: Path) -> None:
    script = SCRIPTS / "seed_forward.py"
    output = tmp_path / "trace.txt"
    command = [sys.executable, "-m", "tensor_dap", "trace", *SIMULATE, "--output", str(output)]
    command += ["--trace", str(tmp_path / "t.db"), str(script)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    text = output.read_text()
    assert "device-mismatch" in text and "noise is on cpu" in text and "cuda:0" in text
    assert "(simulated cuda on the CPU)" in done.stderr


def _check_command(tmp_path: Path, *command: str) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "report.json"
    argv = [sys.executable, "-m", "tensor_dap", "check", *SIMULATE, "--report", str(report)]
    argv += ["--trace", str(tmp_path / "t.db"), "--", *command]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    return done, json.loads(report.read_text())


def test_child_processes_run_on_the_simulated_device(check) -> None:
    run = check(SCRIPTS / "spawns.py", extra=SIMULATE)
    assert run.stdout.strip().endswith("OK")
    child = SCRIPTS / "child_bug.py"
    assert [(f["rule"], f["path"], f["line"]) for f in run.report["findings"]] == [
        ("device-mismatch", str(child), _marked(child))
    ], run.stderr


def test_torchrun_ranks_each_simulate_their_own_device(tmp_path: Path) -> None:
    script = SCRIPTS / "ranks.py"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    done, report = _check_command(tmp_path, *torchrun, "--nproc_per_node", "2", str(script))
    found = sorted((f["process"]["rank"], f["line"], f["message"]) for f in report["findings"])
    assert [(rank, line) for rank, line, _ in found] == [(0, _marked(script)), (1, _marked(script))]
    assert "x is on cuda:0" in found[0][2] and "x is on cuda:1" in found[1][2], done.stderr
    assert report["simulated"] == "cuda"


def test_the_python_per_op_path_simulates_too(check) -> None:
    script = SCRIPTS / "seed_forward.py"
    run = check(script, extra=SIMULATE, env={"TENSOR_DAP_PURE_PYTHON": "1"})
    assert _found(run) == [("device-mismatch", _marked(script))], run.stderr


def test_warnings_from_torch_name_the_programs_lines(check) -> None:
    """PyTorch's C++ warnings (``float(loss)`` of a tensor requiring grad, ``torch.tensor(t)``)
    name the innermost Python frame: the simulation's own mode would be that frame for every op
    (in C, it is none), and the "once per location" filter would show each warning once for the
    whole program. The program's warnings are those of a plain run, line for line."""
    from tensor_dap.agent import native

    if native.fastpath is None:
        pytest.skip("the C fast path is not built here (the Python path names its own frame)")
    script = SCRIPTS / "torch_warnings.py"
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    expected = [line for line in plain.stderr.splitlines() if "Warning:" in line]
    assert len(expected) == 3, plain.stderr
    run = check(script, extra=SIMULATE)
    assert run.returncode == 0, run.stderr
    assert [line for line in run.stderr.splitlines() if "Warning:" in line] == expected


def test_a_cpu_scalar_written_in_place_with_a_device_value_fails_as_on_a_gpu(check) -> None:
    """A 0-dim CPU tensor is a number to CUDA as an input, not as the tensor an in-place op
    writes into: the simulation raises PyTorch's error there, after the finding that names the
    accumulator and its fix."""
    script = SCRIPTS / "seed_scalar_accumulator.py"
    run = check(script, extra=SIMULATE)
    assert run.returncode == 1
    assert "Expected all tensors to be on the same device" in run.stderr
    (finding,) = run.report["findings"]
    assert finding["line"] == _marked(script)
    assert finding["message"].startswith(
        "`running_loss += loss.detach()`: running_loss is on cpu (created at "
        "seed_scalar_accumulator.py:10 by tensor), loss.detach() is on cuda:0"
    )
    assert "Create running_loss with device=device." in finding["message"]


def test_pytorchs_errors_name_the_tensors_as_cuda_does(check) -> None:
    """Autograd's in-place check names the tensor's type: ``torch.cuda.FloatTensor`` on a GPU,
    and so under the simulation (the stand-in's own name, ``accelFloatType``, never shows)."""
    script = SCRIPTS / "inplace_error.py"
    run = check(script, extra=SIMULATE)
    assert run.returncode == 1
    assert "modified by an inplace operation: [torch.cuda.FloatTensor [4, 3]]" in run.stderr
    assert "accel" not in run.stderr
    assert "torch.cuda.FloatTensor" in run.report["exit"]["exception"]


def test_compiled_code_runs_uncompiled_and_watched(check) -> None:
    """``torch.compile`` (its CUDA kernels need a GPU) runs the model uncompiled, said once on
    stderr at the program's first call, and wraps a module as compile does (its
    ``state_dict()`` keys as on a GPU); decorated functions run. The device bug inside a
    compiled model's forward is found (seed_compiled: the run stopped at torch.compile)."""
    script = SCRIPTS / "compiled.py"
    run = check(script, extra=SIMULATE)
    keys = "['_orig_mod.0.bias', '_orig_mod.0.weight'] OptimizedModule OK"
    assert run.stdout.strip() == keys, run.stderr
    note = f"tensor-dap --simulate cuda: torch.compile (at {script}:7) runs uncompiled"
    assert run.stderr.count("runs uncompiled") == 1 and note in run.stderr, run.stderr
