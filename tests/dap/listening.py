"""A program started by ``tensor-dap run --listen HOST:PORT --wait``, for the attach tests:
it waits for a DAP client, which attaches through ``tensor-dap adapter``."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from tensor_dap.channel_protocol import find_agent
from tests.dap.client import DapClient


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def listening_run(
    script: Path, launcher: Optional[list[str]] = None, options: Sequence[str] = ()
) -> Iterator[tuple[subprocess.Popen, int]]:
    """The program (``tensor-dap run`` with ``options``) and its port; killed at the end if it
    is still running."""
    port = free_port()
    process = subprocess.Popen(
        [*(launcher or [sys.executable, "-m", "tensor_dap"]), "run"]
        + ["--listen", f"127.0.0.1:{port}", "--wait", *options, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield process, port
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def agent_of(process: subprocess.Popen, timeout: float = 60) -> dict[str, Any]:
    """The tensor agent's published address once the program has started it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        config = find_agent(process.pid)
        if config is not None:
            return config
        assert process.poll() is None, process.communicate()
        time.sleep(0.1)
    raise AssertionError("the agent never published its address")


@contextlib.contextmanager
def attached(script: Path, initialize: dict[str, Any]) -> Iterator[DapClient]:
    """A DAP client attached to ``script`` run by ``tensor-dap run --listen --wait``, after
    ``initialized``: the test sets its breakpoints and sends ``configurationDone``."""
    with listening_run(script) as (process, port):
        dap = DapClient()
        try:
            agent_of(process)
            dap.request("initialize", initialize)
            dap.send("attach", {"connect": {"host": "127.0.0.1", "port": port}})
            dap.event("initialized")
            yield dap
        finally:
            dap.close()
