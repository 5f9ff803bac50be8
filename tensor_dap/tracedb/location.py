"""Where a run's trace store lives.

The agent (writing) and the language server (reading) must agree on the file without talking to
each other, so the rule is fixed here: ``$TENSOR_DAP_TRACE`` when set, else
``<cwd>/.tensor-dap/trace.db`` under the run's working directory.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping
from typing import Optional

TRACE_ENV = "TENSOR_DAP_TRACE"
TRACE_DIR = ".tensor-dap"
TRACE_FILE = "trace.db"


def default_trace_path(
    cwd: Optional[str] = None, environ: Optional[Mapping[str, str]] = None
) -> pathlib.Path:
    """The trace store for a run in ``cwd`` (default: the current directory) whose environment
    is ``environ`` (default: this process's).

    ``$TENSOR_DAP_TRACE`` wins; a relative value is taken relative to ``cwd``. The folder is not
    created here: :class:`~tensor_dap.tracedb.writer.TraceWriter` creates it when it first writes.
    """
    base = pathlib.Path(cwd) if cwd else pathlib.Path(os.getcwd())
    override = (os.environ if environ is None else environ).get(TRACE_ENV, "").strip()
    if override:
        path = pathlib.Path(override).expanduser()
        return path if path.is_absolute() else base / path
    return base / TRACE_DIR / TRACE_FILE
