"""Stop before it dies, through the real ``tensor-dap check``: ``--memory-limit`` reports the
line whose op takes a device's live tensor memory past the limit, and an out-of-memory error is
reported at the user's line that raised it, each with the device, its live total and the lines
that made the memory; the program itself then runs (or dies) exactly as without tensor-dap."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tensor_dap
from tests.conftest import SAMPLES, SIMULATE_CUDA

PROGRAMS = Path(__file__).resolve().parent / "memory_programs"
GROWING = PROGRAMS / "growing_list.py"
SMALL_DEVICE = PROGRAMS / "small_device.py"
LAST_EVALUATION = PROGRAMS / "last_evaluation.py"


def _line(script: Path, text: str) -> int:
    for number, line in enumerate(script.read_text().splitlines(), start=1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} not in {script}")


def _traceback(stderr: str) -> list[str]:
    """The ``File ..., line N, in f`` lines and the last line of the traceback in ``stderr``."""
    lines = stderr.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("Traceback"))
    frames = [line.strip() for line in lines[start:] if line.strip().startswith("File ")]
    last = next(line for line in lines[start + 1 :] if line and not line[0].isspace())
    return [*frames, last]


def test_a_memory_limit_stops_at_the_line_that_passes_it(check, engine_path) -> None:
    run = check(GROWING, extra=("--memory-limit", "4MiB"), env=engine_path)
    line = _line(GROWING, "outputs.append(")
    assert run.pairs() == {("memory-limit", line)}, run.stderr[-3000:]
    message = run.finding("memory-limit")["message"]
    assert message.startswith("`torch.ones(256, 1024) * step`: live tensor memory on cpu is ")
    assert "5.0 MiB, past the limit of 4.0 MiB" in message
    # the lines holding it, largest first, with their op, bytes and count
    made = message.split("were made at: ", 1)[1]
    assert made.startswith("growing_list.py:5 zeros 2.0 MiB (2 tensors); growing_list.py:8 mul ")
    assert run.stdout == "kept 10\n"  # the program runs on
    assert run.returncode == 1
    assert "memory" not in run.report  # the limit alone prints no --memory summary


def test_under_the_limit_nothing_is_reported(check) -> None:
    run = check(GROWING, extra=("--memory-limit", "64MiB"))
    assert run.findings == [] and run.returncode == 0, run.stderr[-3000:]


@pytest.mark.parametrize("size", ["4MiB", "4194304", "4.2MB", "0.004GiB"])
def test_sizes_are_read_as_people_write_them(check, size: str) -> None:
    run = check(GROWING, extra=("--memory-limit", size))
    assert [f["rule"] for f in run.findings] == ["memory-limit"], run.stderr[-3000:]


@pytest.mark.parametrize("size", ["6XB", "-1", "lots", "0"])
def test_a_bad_limit_is_one_line_and_exit_status_2(tmp_path: Path, size: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tensor_dap", "check", "--memory-limit", size, str(GROWING)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(Path(tensor_dap.__file__).parents[1])),
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"tensor-dap check: --memory-limit: bad memory size '{size}'")
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""


def test_without_a_limit_no_books_are_kept() -> None:
    """The default run pays nothing for memory-limit: no ledger, and memory-limit on without a
    limit stays idle."""
    import torch

    with tensor_dap.watch(rules="all") as watch:
        torch.ones(1000) * 2
    assert watch.memory is None and watch.findings == []


def test_out_of_memory_stops_at_the_user_line_and_the_error_goes_on(
    check, engine_path, tmp_path: Path
) -> None:
    plain = subprocess.run(
        [sys.executable, str(SMALL_DEVICE)], capture_output=True, text=True, cwd=tmp_path
    )
    run = check(SMALL_DEVICE, env=engine_path)
    line = _line(SMALL_DEVICE, "return x @ weights")
    assert run.pairs() == {("out-of-memory", line)}, run.stderr[-3000:]
    message = run.finding("out-of-memory")["message"]
    assert message.startswith(
        "`x @ weights` ran out of memory on cpu (torch.OutOfMemoryError: out of memory. Tried "
        "to allocate 8388608 bytes"
    )
    live = re.search(r"Live tensors on cpu: (\S+ \S+), made at: (.*)\. Continuing", message)
    assert live, message
    # the 8 MiB batch, the 4 batches and the weights, and the two small outputs: all still alive
    assert live.group(1) == "12.0 MiB"
    assert live.group(2).startswith("small_device.py:40 randn 8.0 MiB (1 tensor); ")
    assert "small_device.py:30 randn 2.0 MiB (4 tensors)" in live.group(2)
    # the program dies exactly as it does without tensor-dap
    assert plain.returncode == 1
    assert _traceback(run.stderr) == _traceback(plain.stderr)
    assert run.stdout == plain.stdout == "small batches ok\n"
    assert run.report["exit"]["exception"].startswith("OutOfMemoryError: out of memory")
    assert run.returncode == 1


def test_a_caught_out_of_memory_error_is_reported_and_the_program_goes_on(check) -> None:
    run = check(SMALL_DEVICE, "catch")
    assert [f["rule"] for f in run.findings] == ["out-of-memory"]
    assert run.stdout == "small batches ok\ncaught, retrying in halves\ndone 18\n"


def test_the_table_comes_from_the_books_when_a_limit_keeps_them(check) -> None:
    run = check(SMALL_DEVICE, extra=("--memory-limit", "1GiB"))
    assert [f["rule"] for f in run.findings] == ["out-of-memory"], run.stderr[-3000:]
    assert (
        "Live tensors on cpu: 12.0 MiB, made at: small_device.py:40 randn 8.0 MiB"
        in (run.finding("out-of-memory")["message"])
    )


def test_other_runtime_errors_are_not_out_of_memory(check) -> None:
    run = check(PROGRAMS / "shape_error.py")
    assert run.findings == []
    assert "mat1 and mat2 shapes cannot be multiplied" in run.stderr


def test_the_cpu_allocator_running_out_is_out_of_memory_on_the_device_asked(check) -> None:
    script = SAMPLES / "out_of_memory.py"  # device=torch.device("cuda"): the current device
    run = check(script, extra=SIMULATE_CUDA)
    line = _line(script, "items = nn.Embedding(")
    assert run.pairs() == {("out-of-memory", line)}
    message = run.finding("out-of-memory")["message"]
    assert "ran out of memory on cuda:0 (RuntimeError: DefaultCPUAllocator: can't" in message
    assert "out_of_memory.py:22 randn 1.0 MiB (1 tensor)" in message
    assert "RuntimeError: [enforce fail" in run.stderr  # the error itself, unchanged


def test_a_device_is_reported_again_only_after_falling_under_the_limit() -> None:
    import torch

    from tensor_dap.agent.memory import MemoryLedger

    ledger = MemoryLedger()
    ledger.limit = 10_000
    caller = sys._getframe()
    kept = [torch.zeros(1000)]  # 4000 bytes
    ledger.observe(kept[0], "zeros", caller)
    assert ledger.crossed() == []
    kept.append(torch.zeros(2000))  # 12000: over
    ledger.observe(kept[-1], "zeros", caller)
    assert ledger.crossed() == [("cpu", 12_000)]
    kept.append(torch.zeros(10))  # still over: not again
    ledger.observe(kept[-1], "zeros", caller)
    assert ledger.crossed() == []
    del kept[1:]  # back under the limit...
    more = torch.zeros(2000)  # ...and over again
    ledger.observe(more, "zeros", caller)
    assert ledger.crossed() == [("cpu", 12_000)]
    live, top = ledger.live_top("cpu")
    assert live == 12_000 and [row["bytes"] for row in top] == [8000, 4000]  # by line
