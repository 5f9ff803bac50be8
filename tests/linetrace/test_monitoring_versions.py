"""The ``sys.monitoring`` backend really run on Python 3.12+ (this venv is 3.11).

``backend_driver.py`` traces the same plain-Python code under the venv's Python (with torch,
``sys.settrace`` on 3.11) and under each pyenv 3.12+ found, with ``stub_torch/`` standing in
for torch (see its docstring: a test double so the tracer imports, not a model of tensors).
The traces must be identical, entry by entry.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any, Optional

import pytest

from tests.linetrace.entries import parse

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DRIVER = HERE / "backend_driver.py"
STUB = HERE / "stub_torch"
SESSIONS = 3  # the driver calls its snooped function three times


def _python(version: str) -> Optional[str]:
    for path in sorted(Path("/root/.pyenv/versions").glob(f"{version}.*/bin/python")):
        return str(path)
    return shutil.which(f"python{version}")


@cache
def _run(python: str, *args: str, stub: bool = True) -> dict[str, Any]:
    path = [str(STUB), str(ROOT)] if stub else [str(ROOT)]
    done = subprocess.run(
        [python, str(DRIVER), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(path)),
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _reference() -> dict[str, Any]:
    """The venv's Python with the real torch (sys.settrace below 3.12)."""
    return _run(sys.executable, stub=False)


@pytest.mark.parametrize("version", ["3.12", "3.13"])
def test_monitoring_backend_matches_settrace(version: str) -> None:
    python = _python(version)
    if python is None:
        pytest.skip(f"no Python {version} here (pyenv or python{version} on PATH)")
    got = _run(python)
    assert got["python"] == [int(part) for part in version.split(".")]
    assert got["backend"] == "MonitoringBackend"
    assert got["results"] == _reference()["results"]
    # the same entries as sys.settrace gives (on 3.11, and on this Python too)
    for reference in (_reference(), _run(python, "settrace")):
        assert parse("\n".join(got["trace"])) == parse("\n".join(reference["trace"]))
        assert parse("\n".join(got["block"])) == parse("\n".join(reference["block"]))
        assert got["only_sessions"] == reference["only_sessions"]
    entries = parse("\n".join(got["trace"]))
    source = DRIVER.read_text().splitlines()
    hot = ("for v in values: doubled", "for i in range(n):", "total += i", "items.append(i)")
    hot += ("text = json.dumps",)
    lines = [str(n) for n, text in enumerate(source, 1) if text.strip().startswith(hot)]
    assert sorted(e.name for e in entries if e.kind == "summary") == sorted(lines * SESSIONS)
    assert any(e.kind == "exception-value" and "bad 67" in e.value for e in entries)
    # library code: asked about once per code object and session (DISABLEd after), no lines
    assert got["library_wanted"] and set(got["library_wanted"].values()) == {SESSIONS}
    assert got["library_lines"] == 0
    assert not got["tool_left"] and not got["gettrace_left"]


def test_settrace_decides_about_library_code_once_per_session() -> None:
    """settrace still calls its global function on every call; known library code is answered
    from a cache there, so the tracer's decision runs once per code object and session."""
    reference = _reference()
    assert 1 <= max(reference["library_wanted"].values()) <= SESSIONS
    assert reference["library_lines"] == 0
