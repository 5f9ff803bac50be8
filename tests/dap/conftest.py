"""Every debug session writes a trace store (``tensor_dap.adapter.session_trace``): the tests'
sessions write theirs in the test's temporary folder, never in the repository's
``sample_project/``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensor_dap.tracedb import TRACE_ENV


@pytest.fixture(autouse=True)
def trace_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the adapter started by this test (it inherits the environment) puts the store."""
    path = tmp_path / "session-trace.db"
    monkeypatch.setenv(TRACE_ENV, str(path))
    return path
