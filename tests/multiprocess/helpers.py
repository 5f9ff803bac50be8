"""Running ``tensor-dap check`` on multi-process programs: free ports, a hard timeout that
takes the whole process group down, and the ``# expect[PROCESS]: RULE`` markers of the
multi-process samples."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from tests.conftest import CheckRun

PYTHON = sys.executable
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
_EXPECT = re.compile(r"#\s*expect\[([a-z0-9 ]+)\]:\s*([a-z-]+)")


def process_markers(script: Path) -> list[tuple[str, int, str]]:
    """(rule, line, process kind) for each ``# expect[rank 1]: RULE`` comment in ``script``."""
    found = []
    for number, text in enumerate(script.read_text().splitlines(), start=1):
        match = _EXPECT.search(text)
        if match:
            found.append((match.group(2), number, match.group(1).strip()))
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_group(
    command: list[str], cwd: Path, timeout: float = 240, env: Optional[dict[str, str]] = None
) -> subprocess.CompletedProcess:
    """Run ``command`` in its own process group; on timeout kill the group, leave no orphan."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise AssertionError(f"timed out after {timeout}s: {command}\n{stderr[-3000:]}") from None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # whatever it left behind
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def check(
    tmp_path: Path,
    *args: str,
    command: Optional[list[str]] = None,
    rules: Optional[str] = None,
    env: Optional[dict[str, str]] = None,
    extra: tuple[str, ...] = (),
) -> CheckRun:
    """``tensor-dap check [--rules] --report --trace [EXTRA] (SCRIPT ARGS | -- COMMAND)``."""
    report = tmp_path / "report.json"
    cli = [PYTHON, "-m", "tensor_dap", "check", "--report", str(report)]
    cli += ["--trace", str(tmp_path / "trace.db")]
    if rules:
        cli += ["--rules", rules]
    cli += [*extra, "--", *command] if command else [*extra, *args]
    done = run_group(cli, tmp_path, env=env)
    data = json.loads(report.read_text()) if report.exists() else {}
    return CheckRun(done.returncode, done.stdout, done.stderr, data)


def store_rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(db)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


def pids_running(marker: str) -> list[int]:
    """Live processes whose command line contains ``marker`` (orphans a test left)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                cmdline = file.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and int(entry) != os.getpid():
            found.append(int(entry))
    return found
