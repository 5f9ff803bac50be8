"""Output paths the run could not write are refused before the script runs (one line, exit 2);
missing folders are created."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = 'print("the script ran")\n'


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    command = [sys.executable, "-m", "tensor_dap", *args, str(script)]
    return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=120)


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (("check", "--report", "."), "--report .: is a directory; give a file name"),
        (("check", "--report", "a-file/report.json"), "--report a-file/report.json: cannot create"),
        (("check", "--trace", "a-file/trace.db"), "--trace a-file/trace.db: cannot create"),
        (("trace", "--output", "a-file/out.txt"), "--output a-file/out.txt: cannot create"),
    ],
)
def test_an_unwritable_output_is_refused_before_the_script_runs(
    tmp_path: Path, args: tuple[str, ...], why: str
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    done = _run(tmp_path, *args)
    assert done.returncode == 2
    assert "the script ran" not in done.stdout
    (line,) = done.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith(f"tensor-dap {args[0]}: {why}"), line


def test_missing_folders_are_created(tmp_path: Path) -> None:
    done = _run(tmp_path, "trace", "--output", "logs/run1/trace.txt")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "logs" / "run1" / "trace.txt").is_file()
    done = _run(tmp_path, "check", "--report", "reports/today/report.json")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "reports" / "today" / "report.json").is_file()
