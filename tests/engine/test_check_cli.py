"""``tensor-dap check`` as a command: the script runs as under ``python``, exit statuses,
usage errors, the JSON report and the trace store."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tensor_dap.tracedb import TraceReader
from tests.conftest import SAMPLES, SIMULATE_CUDA


def write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_script_runs_as_main_with_argv_and_path(tmp_path: Path, check) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "helper_mod.py").write_text("VALUE = 42\n")
    script = write(
        folder,
        "main.py",
        """
        import sys, json
        import helper_mod
        print(json.dumps({"name": __name__, "argv": sys.argv, "path0": sys.path[0],
                          "value": helper_mod.VALUE}))
        print("to stderr", file=sys.stderr)
        """,
    )
    run = check(script, "--epochs", "1", "-x")
    seen = json.loads(run.stdout.strip())
    assert seen == {
        "name": "__main__",
        "argv": [str(script), "--epochs", "1", "-x"],
        "path0": str(folder),
        "value": 42,
    }
    assert "to stderr" in run.stderr
    assert run.returncode == 0
    assert run.report["exit"] == {"status": "ok", "code": 0, "exception": None}


def test_exceptions_come_through_unchanged(tmp_path: Path, check) -> None:
    script = write(
        tmp_path,
        "boom.py",
        """
        import torch
        def f():
            raise ValueError("bad shape (3, 4)")
        f()
        """,
    )
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    run = check(script)
    assert run.returncode == 1
    # the traceback is the one python prints, frame for frame
    traceback = run.stderr[run.stderr.index("Traceback") :].split("ValueError")[0]
    assert traceback == plain.stderr.split("ValueError")[0]
    assert run.stderr.count("ValueError: bad shape (3, 4)") == 1
    assert run.report["exit"]["exception"] == "ValueError: bad shape (3, 4)"


def test_argv0_is_the_path_as_given(tmp_path: Path) -> None:
    script = write(tmp_path, "argv.py", "import sys; print(sys.argv)\n")
    done = subprocess.run(
        [sys.executable, "-m", "tensor_dap", "check", "--trace", "t.db", "argv.py", "a"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    plain = subprocess.run(
        [sys.executable, "argv.py", "a"], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.stdout == plain.stdout == "['argv.py', 'a']\n"
    assert script.exists()


def test_sys_exit_codes(tmp_path: Path, check) -> None:
    assert check(write(tmp_path, "ok.py", "import sys; sys.exit(0)\n")).returncode == 0
    run = check(write(tmp_path, "three.py", "import sys; sys.exit(3)\n"))
    assert run.returncode == 3 and run.report["exit"]["code"] == 3  # the script's own
    found = "import sys, torch\ntorch.ones(4) - torch.ones(4, 1)\nsys.exit(3)\n"
    run = check(write(tmp_path, "found.py", found))
    assert run.returncode == 3 and [f["rule"] for f in run.findings] == ["broadcast"]
    run = check(write(tmp_path, "found_ok.py", found.replace("sys.exit(3)", "sys.exit(0)")))
    assert run.returncode == 1
    # what the OS keeps of the status: sys.exit(256) exits 0, sys.exit(-1) 255
    assert check(write(tmp_path, "wraps.py", "import sys; sys.exit(256)\n")).returncode == 0
    assert check(write(tmp_path, "minus.py", "import sys; sys.exit(-1)\n")).returncode == 255


OS_EXIT = """
import os
import torch

difference = torch.ones(4) - torch.ones(4, 1)
print(difference.shape, flush=True)
os._exit(STATUS)
print("never")
"""


@pytest.mark.parametrize("status", [0, 5])
def test_os_exit_still_reports(tmp_path: Path, check, status: int) -> None:  # noqa: ANN001
    """``os._exit()`` ends the process at once: the report (and its summary, and check's
    status) comes first; it was lost, and check exited 0 with a finding printed."""
    run = check(write(tmp_path, "quits.py", OS_EXIT.replace("STATUS", str(status))))
    assert run.returncode == (status or 1)  # (the program's own when it failed)
    assert run.stdout == "torch.Size([4, 4])\n"
    assert run.pairs() == {("broadcast", 5)}
    assert run.report["exit"]["code"] == status
    assert "tensor-dap: 1 finding(s)" in run.stderr


def test_usage_errors_exit_2_without_traceback(tmp_path: Path) -> None:
    missing = subprocess.run(
        [sys.executable, "-m", "tensor_dap", "check", str(tmp_path / "nope.py")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2
    assert "no such script" in missing.stderr and "Traceback" not in missing.stderr
    script = write(tmp_path, "s.py", "print('hi')\n")
    unknown = subprocess.run(
        [sys.executable, "-m", "tensor_dap", "check", "--rules", "bogus", str(script)],
        capture_output=True,
        text=True,
    )
    assert unknown.returncode == 2
    assert "unknown rule 'bogus'" in unknown.stderr and "Traceback" not in unknown.stderr
    assert "hi" not in unknown.stdout


def test_rule_selection(check) -> None:
    script = SAMPLES / "silent_broadcast.py"
    assert check(script, rules="device-mismatch").findings == []
    assert {f["rule"] for f in check(script, rules="broadcast").findings} == {"broadcast"}


def test_tracedb_records_lines_and_findings(tmp_path: Path, check) -> None:
    script = SAMPLES / "masked_scatter_on_cpu.py"
    check(script, extra=SIMULATE_CUDA)
    db = tmp_path / "trace.db"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    reader = TraceReader(db)
    rows = {(o.line, o.name): o for o in reader.observations_for(str(script))}
    y = rows[(16, "y")]
    assert (y.shape, y.dtype, y.device) == ((6,), "float32", "cpu")
    mask = rows[(21, "mask")]
    assert mask.device == "cuda:0"
    findings = reader.findings_for(str(script))
    assert [(f.rule, f.line) for f in findings] == [("device-mismatch", 17)]


def test_tracedb_is_bounded_by_code_not_steps(tmp_path: Path, check) -> None:
    def rows_after(steps: int) -> int:
        script = write(
            tmp_path,
            "loop.py",
            f"""
            import torch
            x = torch.zeros(3)
            for i in range({steps}):
                x = x + 1
                y = x * 2
            """,
        )
        check(script)
        reader = TraceReader(tmp_path / "trace.db")
        return len(reader.observations_for(str(script)))

    assert rows_after(5) == rows_after(500) == 3
    reader = TraceReader(tmp_path / "trace.db")
    hits = {o.line: o.hits for o in reader.observations_for(str(tmp_path / "loop.py"))}
    assert hits[5] >= 500


def test_corrupt_trace_store_does_not_stop_the_run(tmp_path: Path) -> None:
    db = tmp_path / "trace.db"
    db.write_bytes(b"this is not sqlite" * 100)
    script = write(tmp_path, "s.py", "import torch\nprint(torch.ones(2).sum().item())\n")
    done = subprocess.run(
        [sys.executable, "-m", "tensor_dap", "check", "--trace", str(db), str(script)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0
    assert "2.0" in done.stdout
    assert "trace store not written" in done.stderr


def test_origin_read_from_source_when_the_engine_never_saw_it(tmp_path: Path, check) -> None:
    """``torch.Tensor([0.0])`` is not a torch function: the origin comes from the source."""
    script = write(
        tmp_path,
        "accumulate.py",
        """
        import torch
        from tensor_dap.testing import pick_device
        device = pick_device()
        parts = [torch.ones(1, device=device, requires_grad=True) * 2 for _ in range(3)]
        total = torch.Tensor([0.0])
        for part in parts:
            total = total + part
        """,
    )
    run = check(script)
    assert run.pairs() == {("device-mismatch", 8)}
    assert run.finding("device-mismatch")["message"] == (
        "`total + part`: total is on cpu (created at accumulate.py:6 by `torch.Tensor([0.0])`), "
        "part is on accel:0 (created at accumulate.py:5 by mul). "
        "Create total with device=device."
    )
