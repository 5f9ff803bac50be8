"""The trace store: what runs of a user's script observed, for the language server.

A run's agent writes, per (file, line, name, process), the last shape, dtype, device and grad
state it saw and how often, plus the findings of the rules, into an SQLite file (WAL mode) at
``.tensor-dap/trace.db`` under the run's working directory (override: ``$TENSOR_DAP_TRACE``).
The language server reads it to show inline hints and diagnostics, polling
:meth:`TraceReader.data_version` to know when to refresh.
"""

from __future__ import annotations

from .digest import file_digest, source_text, text_digest
from .errors import TraceStoreError
from .location import TRACE_ENV, default_trace_path
from .reader import TraceReader, observation_from_row
from .records import Observation, RunInfo, process_label, run_command
from .schema import SCHEMA_VERSION
from .writer import MAX_FINDINGS_PER_RUN, MAX_RUNS_KEPT, TraceWriter

__all__ = [
    "MAX_FINDINGS_PER_RUN",
    "MAX_RUNS_KEPT",
    "SCHEMA_VERSION",
    "TRACE_ENV",
    "Observation",
    "RunInfo",
    "TraceReader",
    "TraceStoreError",
    "TraceWriter",
    "default_trace_path",
    "observation_from_row",
    "file_digest",
    "process_label",
    "run_command",
    "source_text",
    "text_digest",
]
