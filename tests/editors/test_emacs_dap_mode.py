"""Emacs dap-mode, a real editor DAP client, starts and drives ``tensor-dap adapter``.

``emacs --batch -Q`` loads the user-facing ``tensor-dap-dap-mode.el`` through
``dap-mode-driver.el``, runs ``dap-debug`` on the "tensor-dap: current file" template for a copy
of a sample script, and prints one ``TENSOR-DAP-EMACS {json}`` line per finding. Needs Debian's
``emacs-nox`` and ``elpa-dap-mode`` (``tests/editors/install-emacs.sh``); skipped only when
there is no ``emacs`` at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, SAMPLES, expected_findings

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "dap-mode-driver.el"
DEBIAN_ELPA = Path("/usr/share/emacs/site-lisp/elpa")  # where elpa-dap-mode puts dap-mode-*
MARKER = "TENSOR_DAP_EMACS_TEST"
# the sample is CUDA code: its launch gets :simulate "cuda", as a user without a GPU adds it to
# the template (the attach test starts `tensor-dap run --simulate cuda` instead)
SIMULATE = {"TENSOR_DAP_SIMULATE": "cuda"}
EMACS_TIMEOUT = 180  # the driver gives up first (printing its logs): 60 s per wait, 150 in all

pytestmark = pytest.mark.skipif(
    shutil.which("emacs") is None,
    reason="emacs is not installed (tests/editors/install-emacs.sh installs emacs-nox and "
    "elpa-dap-mode)",
)


def _marked_processes(tag: str) -> dict[int, str]:
    """Processes (any descendant of the Emacs run) whose environment carries ``tag``."""
    needle = f"{MARKER}={tag}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as env:
                if needle not in env.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as cmd:
                found[int(entry)] = cmd.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or a zombie
            continue
    return found


def _kill_all(tag: str, group: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(group, signal.SIGKILL)
    for pid in _marked_processes(tag):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _run_dap_mode(
    script: Path, home: Path, tag: str = "", **extra: str
) -> tuple[list[dict[str, Any]], str]:
    """Run the driver on ``script``; its TENSOR-DAP-EMACS lines and the whole output."""
    tag = tag or uuid.uuid4().hex
    env = dict(os.environ)
    env.update(
        HOME=str(home),  # Emacs and lsp-mode keep their state files under it
        TENSOR_DAP_PYTHON=sys.executable,
        TENSOR_DAP_SCRIPT=str(script),
        TENSOR_DAP_DEADLINE="60",
        TENSOR_DAP_TOTAL_DEADLINE=str(EMACS_TIMEOUT - 30),
        **{MARKER: tag},
        **extra,
    )
    emacs = subprocess.Popen(
        ["emacs", "--batch", "-Q", "-l", str(DRIVER)],
        cwd=script.parent,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, killed whole on failure
        text=True,
    )
    try:
        output, _ = emacs.communicate(timeout=EMACS_TIMEOUT)
    except subprocess.TimeoutExpired:
        _kill_all(tag, emacs.pid)
        output, _ = emacs.communicate()
        pytest.fail(f"emacs ran past {EMACS_TIMEOUT} s; its output:\n{output}")
    finally:
        if emacs.poll() is None:
            _kill_all(tag, emacs.pid)
            emacs.wait()
    # nothing Emacs started (adapter, debugpy, launcher, debuggee) may outlive the session
    until = time.monotonic() + 15
    while (left := _marked_processes(tag)) and time.monotonic() < until:
        time.sleep(0.2)
    _kill_all(tag, emacs.pid)
    assert not left, f"processes left behind: {left}\n{output}"
    assert emacs.returncode == 0, f"emacs exited {emacs.returncode}:\n{output}"
    lines = [
        json.loads(line.split(" ", 1)[1])
        for line in output.splitlines()
        if line.startswith("TENSOR-DAP-EMACS ")
    ]
    return lines, output


def _events(lines: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("event") == name]


def _event(lines: list[dict[str, Any]], name: str, output: str) -> dict[str, Any]:
    found = _events(lines, name)
    assert found, f"no {name!r} line from the driver:\n{output}"
    return found[0]


def _line_of(script: Path, text: str) -> int:
    return next(n for n, line in enumerate(script.read_text().splitlines(), 1) if text in line)


@pytest.fixture
def sample_copy(tmp_path: Path) -> Path:
    """A copy of masked_scatter_on_cpu.py in a project folder of its own (a HOME beside it)."""
    assert any(DEBIAN_ELPA.glob("dap-mode-*/dap-mode.el*")), (
        "Debian's elpa-dap-mode is missing: run tests/editors/install-emacs.sh"
    )
    (tmp_path / "home").mkdir()
    (tmp_path / "project").mkdir()
    script = tmp_path / "project" / "masked_scatter_on_cpu.py"
    shutil.copyfile(SAMPLES / script.name, script)
    return script


@pytest.mark.timeout(EMACS_TIMEOUT + 60)
def test_dap_mode_stops_on_the_user_line_with_rule_message_and_tensor_variables(
    sample_copy: Path,
) -> None:
    script = sample_copy
    (rule, line), *_ = sorted(expected_findings(script), key=lambda pair: pair[1])

    lines, output = _run_dap_mode(script, script.parent.parent / "home", **SIMULATE)

    created = _event(lines, "session-created", output)
    assert created["adapter"] == [sys.executable, "-m", "tensor_dap", "adapter"]
    stopped = _event(lines, "stopped", output)
    assert stopped["reason"] == "exception"
    assert (os.path.realpath(stopped["path"]), stopped["line"]) == (os.path.realpath(script), line)
    assert stopped["name"] == "myfunc"
    info = _event(lines, "exceptionInfo", output)
    assert info["exceptionId"] == rule
    description = info["description"]
    for tensor in ("y is on cpu", "mask is on", "x is on"):
        assert tensor in description, description
    zeros = _line_of(script, "= torch.zeros(")
    assert f"y is on cpu (created at {script.name}:{zeros} by zeros)" in description
    # what dap-mode itself showed for the stop (its own exceptionInfo request)
    shown = _event(lines, "shown", output)["text"]
    assert shown.startswith(f"Exception has occurred: {rule}\n"), shown
    assert "y is on cpu" in shown
    values = _event(lines, "variables", output)["values"]
    assert re.match(r"tensor<\(6,\) float32 cpu", values.get("y", "")), values
    assert values.get("mask", "").startswith("tensor<(6,) bool "), values
    assert _event(lines, "terminated", output)["stops"] == 1
    assert _event(lines, "adapter-exited", output)["state"] == "terminated"


def _readme_elisp(into: Path) -> Path:
    """The elisp block users copy: docs/debugging.md's (linked from the README) once it has
    one, else README-snippet.md's."""
    for source in (ROOT / "docs" / "debugging.md", HERE / "README-snippet.md"):
        blocks = re.findall(r"```elisp\n(.*?)```", source.read_text(), re.DOTALL)
        blocks = [b for b in blocks if "dap-register-debug-provider" in b]
        if blocks:
            into.write_text(blocks[0])
            return into
    raise AssertionError("no elisp block with dap-register-debug-provider in docs/debugging.md")


@pytest.mark.timeout(EMACS_TIMEOUT + 60)
def test_dap_mode_breakpoint_step_and_rule_ticked_as_exception_breakpoint(
    sample_copy: Path,
) -> None:
    """The README's elisp, as a user copies it. No rule in the launch; the rule's box ticked in
    ``dap-exception-breakpoints`` (dap-ui's breakpoints view) turns it on; a line breakpoint
    (``dap-breakpoint-add``) and ``dap-next`` work as under debugpy, and so does debugpy's own
    "Uncaught Exceptions" box."""
    script = sample_copy
    config = _readme_elisp(script.parent.parent / "readme.el")
    (rule, line), *_ = sorted(expected_findings(script), key=lambda pair: pair[1])
    mask_line = _line_of(script, "mask = torch.tensor(")

    lines, output = _run_dap_mode(
        script,
        script.parent.parent / "home",
        TENSOR_DAP_BREAK_LINE=str(mask_line),
        TENSOR_DAP_TICK=rule,
        TENSOR_DAP_CONFIG=str(config),
        **SIMULATE,
    )

    stops = [(s["reason"], s["line"]) for s in _events(lines, "stopped")]
    assert stops == [
        ("breakpoint", mask_line),
        ("step", _line_of(script, "source = torch.tensor(")),
        ("exception", line),  # the ticked tensor rule, before the op runs
        ("exception", line),  # the op then raises: debugpy's "Uncaught Exceptions", on by default
    ], output
    after_step = _events(lines, "variables")[1]["values"]
    assert after_step.get("mask", "").startswith("tensor<(6,) bool "), after_step
    rule_info, raised_info = _events(lines, "exceptionInfo")
    assert rule_info["exceptionId"] == rule
    assert "y is on cpu" in rule_info["description"]
    assert raised_info["exceptionId"] == "RuntimeError"
    shown = [s["text"] for s in _events(lines, "shown")]
    assert shown[0].startswith(f"Exception has occurred: {rule}\n"), shown
    assert shown[1].startswith("Exception has occurred: RuntimeError\n"), shown
    assert _event(lines, "adapter-exited", output)["state"] == "terminated"


def _listening(port: int) -> bool:
    """Whether some process listens on 127.0.0.1:``port`` (without connecting to it)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            for row in rows.readlines()[1:]:
                local, state = row.split()[1], row.split()[3]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    return True
    return False


@pytest.mark.timeout(EMACS_TIMEOUT + 90)
def test_dap_mode_attaches_to_tensor_dap_run(sample_copy: Path) -> None:
    """The attach template: ``tensor-dap run --listen PORT --wait``, then dap-debug attaches."""
    script = sample_copy
    (rule, line), *_ = sorted(expected_findings(script), key=lambda pair: pair[1])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    tag = uuid.uuid4().hex
    log = script.parent.parent / "tensor-dap-run.log"
    # the console script, as the README says (debugpy then appends a note to the exceptionId
    # the adapter rewrites: fixed in 1b0efd7)
    console = Path(sys.executable).parent / "tensor-dap"
    command = [str(console)] if console.exists() else [sys.executable, "-m", "tensor_dap"]
    with log.open("w") as out:  # the child keeps its own copy of the descriptor
        run = subprocess.Popen(
            [*command, "run", "--simulate", "cuda", "--listen", f"127.0.0.1:{port}", "--wait"]
            + [script.name],
            cwd=script.parent,
            env={**os.environ, MARKER: tag},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        until = time.monotonic() + 60
        while not _listening(port):
            assert run.poll() is None, f"tensor-dap run exited:\n{log.read_text()}"
            assert time.monotonic() < until, "tensor-dap run never listened"
            time.sleep(0.2)
        lines, output = _run_dap_mode(
            script,
            script.parent.parent / "home",
            tag=tag,
            TENSOR_DAP_TEMPLATE="tensor-dap: attach 127.0.0.1:5678",
            TENSOR_DAP_PORT=str(port),
        )
        run.wait(timeout=30)
    finally:
        _kill_all(tag, run.pid)
    stopped = _event(lines, "stopped", output)
    assert (stopped["reason"], stopped["line"]) == ("exception", line), output
    values = _event(lines, "variables", output)["values"]
    assert values.get("y", "").startswith("tensor<(6,) float32 cpu"), values
    info = _event(lines, "exceptionInfo", output)
    assert "y is on cpu" in info["description"]
    assert info["exceptionId"] == rule
    assert _event(lines, "shown", output)["text"].startswith(f"Exception has occurred: {rule}\n")


@pytest.mark.timeout(EMACS_TIMEOUT + 60)
def test_dap_mode_data_breakpoint_on_a_tensor(tmp_path: Path) -> None:
    """The same data breakpoint from Emacs: at a line breakpoint, ``dataBreakpointInfo`` and
    ``setDataBreakpoints`` through dap-mode's ``dap-request`` (docs/debugging.md), continue:
    paused on the line whose in-place op writes the tensor."""
    (tmp_path / "home").mkdir()
    (tmp_path / "project").mkdir()
    script = tmp_path / "project" / "writes.py"
    shutil.copyfile(HERE.parent / "dap" / "data_programs" / "writes.py", script)

    lines, output = _run_dap_mode(
        script,
        tmp_path / "home",
        TENSOR_DAP_BREAK_LINE=str(_line_of(script, "# line 7")),
        TENSOR_DAP_DATA_WATCH="w",
    )

    armed = _event(lines, "dataBreakpoint", output)
    assert armed["verified"] is True, armed
    assert armed["description"].startswith("w tensor<(4,) float32 cpu"), armed
    stops = [(s["reason"], s["line"]) for s in _events(lines, "stopped")]
    assert stops == [("breakpoint", 7), ("data breakpoint", _line_of(script, "# line 9"))], output
    assert _event(lines, "adapter-exited", output)["state"] == "terminated"
