"""``tensor-dap lint`` as a command: its lines, its JSON, its exit statuses and its usage
errors, on files and folders."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

BUGGY = textwrap.dedent(
    """\
    import torch

    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    for p in model.parameters():
        p.data.mul_(0.5)  # tensor-dap: ignore[data-write]
    """
)

CLEAN = textwrap.dedent(
    """\
    import torch

    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    """
)

INIT = textwrap.dedent(
    """\
    def weights_init(m):
        m.weight.data.normal_(0.0, 0.02)
    """
)


def lint(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tensor_dap", "lint", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_one_line_per_finding_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(BUGGY)
    run = lint("train.py", cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    [line] = run.stdout.splitlines()
    assert line.startswith("train.py:6:5 missing-zero-grad This loop calls `.backward()` and ")
    assert run.stderr == ""


def test_clean_files_exit_0_and_hints_only_on_request(tmp_path: Path) -> None:
    (tmp_path / "clean.py").write_text(CLEAN)
    (tmp_path / "init.py").write_text(INIT)
    run = lint(cwd=tmp_path)
    assert (run.returncode, run.stdout, run.stderr) == (0, "", "")
    run = lint("--severity", "hint", ".", cwd=tmp_path)
    assert run.returncode == 1
    assert run.stdout.startswith("init.py:2:5 data-write `m.weight.data` is written while the ")


def test_folders_are_walked_for_python_files(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "train.py").write_text(BUGGY)
    (tmp_path / "pkg" / "notes.txt").write_text(BUGGY)
    (tmp_path / "pkg" / ".venv").mkdir()
    (tmp_path / "pkg" / ".venv" / "lib.py").write_text(BUGGY)
    (tmp_path / "pkg" / "clean.py").write_text(CLEAN)
    run = lint("pkg", cwd=tmp_path)
    assert run.returncode == 1
    assert [line.split(" ")[0] for line in run.stdout.splitlines()] == [
        str(Path("pkg/sub/train.py")) + ":6:5"
    ]


def test_json(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(BUGGY)
    (tmp_path / "clean.py").write_text(CLEAN)
    run = lint("--format", "json", "train.py", "clean.py", cwd=tmp_path)
    assert run.returncode == 1
    report = json.loads(run.stdout)
    assert report["files"] == 2
    [finding] = report["findings"]
    assert {k: v for k, v in finding.items() if k != "message"} == {
        "path": "train.py",
        "line": 6,
        "column": 5,
        "end_line": 6,
        "end_column": 21,
        "code": "missing-zero-grad",
        "severity": "warning",
        "fix": "Insert `optimizer.zero_grad()` at the start of the loop",
    }
    clean = lint("--format", "json", "clean.py", cwd=tmp_path)
    assert (clean.returncode, json.loads(clean.stdout)) == (0, {"files": 1, "findings": []})


def test_a_file_that_does_not_parse_is_named_on_stderr(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("def f(:\n    pass\n")
    (tmp_path / "train.py").write_text(BUGGY)
    run = lint(".", cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr.startswith("tensor-dap lint: broken.py:1: not linted: ")
    assert len(run.stderr.splitlines()) == 1
    assert run.stdout.startswith("train.py:6:5 missing-zero-grad")


def test_usage_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    run = lint("missing.py", cwd=tmp_path)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == "tensor-dap lint: no such file or directory: missing.py\n"
    run = lint("--format", "xml", ".", cwd=tmp_path)
    assert run.returncode == 2
    assert "invalid choice: 'xml'" in run.stderr
