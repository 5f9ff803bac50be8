"""Shared helpers: run the real ``tensor-dap`` CLI and read the ``# expect:`` markers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_project"
#: how the samples (CUDA code) are checked without a GPU: the flag a user passes
SIMULATE_CUDA = ("--simulate", "cuda")
CLEAN_SCRIPTS = ROOT / "tests" / "engine" / "clean_scripts"

_EXPECT = re.compile(r"#\s*expect:\s*([a-z-]+(?:\s*,\s*[a-z-]+)*)")
_RULES = re.compile(r"#\s*tensor-dap:\s*rules=([a-z,-]+)")
_MEMORY_LIMIT = re.compile(r"#\s*tensor-dap:\s*memory-limit=(\S+)")


def expected_findings(script: Path) -> set[tuple[str, int]]:
    """(rule, line) pairs marked with ``# expect: RULE`` in ``script``."""
    found = set()
    for number, text in enumerate(script.read_text().splitlines(), start=1):
        match = _EXPECT.search(text)
        if match:
            for rule in match.group(1).split(","):
                found.add((rule.strip(), number))
    return found


_PAUSES = re.compile(r"#\s*pauses:\s*([a-z-]+)")


def paused_lines(script: Path) -> dict[str, int]:
    """rule -> the line marked ``# pauses: RULE``: where the debugger pauses for a finding
    reported at a line that no longer runs (the copy a later ``step()`` found stale)."""
    return {
        match.group(1): number
        for number, text in enumerate(script.read_text().splitlines(), start=1)
        if (match := _PAUSES.search(text))
    }


def script_rules(script: Path) -> Optional[str]:
    match = _RULES.search(script.read_text())
    return match.group(1) if match else None


def script_memory_limit(script: Path) -> Optional[str]:
    """The limit of a ``# tensor-dap: memory-limit=SIZE`` comment (the memory-limit sample)."""
    match = _MEMORY_LIMIT.search(script.read_text())
    return match.group(1) if match else None


def script_options(script: Path) -> tuple[str, ...]:
    """``check`` options a sample asks for in its comments (``--memory-limit SIZE``)."""
    limit = script_memory_limit(script)
    return ("--memory-limit", limit) if limit else ()


@dataclass
class CheckRun:
    returncode: int
    stdout: str
    stderr: str
    report: dict[str, Any]

    @property
    def findings(self) -> list[dict[str, Any]]:
        return self.report.get("findings", [])

    def pairs(self) -> set[tuple[str, int]]:
        return {(f["rule"], f["line"]) for f in self.findings}

    def finding(self, rule: str) -> dict[str, Any]:
        matches = [f for f in self.findings if f["rule"] == rule]
        assert matches, f"no {rule} finding in {self.findings}"
        return matches[0]


def run_check(
    script: Path,
    *args: str,
    rules: Optional[str] = None,
    tmp_path: Path,
    extra: tuple[str, ...] = (),
    cwd: Optional[Path] = None,
    env: Optional[dict[str, str]] = None,
) -> CheckRun:
    """Run ``tensor-dap check`` as a user would, in a subprocess, with a JSON report
    (``env``: variables to add to the environment)."""
    report = tmp_path / f"report-{script.stem}.json"
    command = [sys.executable, "-m", "tensor_dap", "check", "--report", str(report)]
    command += ["--trace", str(tmp_path / "trace.db")]
    if rules:
        command += ["--rules", rules]
    command += [*extra, str(script), *args]
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=240, cwd=cwd or tmp_path, env=env
    )
    data = json.loads(report.read_text()) if report.exists() else {}
    return CheckRun(done.returncode, done.stdout, done.stderr, data)


@pytest.fixture
def check(tmp_path: Path):
    def runner(script: Path, *args: str, **kwargs: Any) -> CheckRun:
        return run_check(script, *args, tmp_path=tmp_path, **kwargs)

    return runner


@pytest.fixture(params=["c", "python"])
def engine_path(request: pytest.FixtureRequest):
    """Run the test with the engine's per-op path in C (``_fastpath``), then in Python.

    Yields the environment a ``tensor-dap`` subprocess needs for the same path; in this process
    the switch is :func:`tensor_dap.agent.mode.use_native`.
    """
    from tensor_dap.agent import mode, native

    if request.param == "c" and native.fastpath is None:
        if os.environ.get("TENSOR_DAP_REQUIRE_NATIVE"):  # CI: the build must not fail silently
            pytest.fail(
                "TENSOR_DAP_REQUIRE_NATIVE is set but tensor_dap.agent._fastpath is not built"
            )
        pytest.skip("the C fast path is not built here")
    was = native.enabled
    mode.use_native(request.param == "c")
    try:
        yield {"TENSOR_DAP_PURE_PYTHON": "1" if request.param == "python" else "0"}
    finally:
        mode.use_native(was)


def pytest_configure(config: pytest.Config) -> None:
    """Register the stand-in accelerator before any test runs a backward pass.

    PyTorch's autograd engine sizes its per-device queues at the first backward of a process;
    a device registered after that cannot run backward.
    """
    from tensor_dap.testing import accelerator_device

    accelerator_device()
