"""The plain records that go into and come out of the trace store.

Writers (the agent, in the user's process and its workers) and readers (the language server) share
these dataclasses and nothing else: no tensors, frames or sqlite rows cross the boundary, so either
side can change its internals without the other noticing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

DEFAULT_PROCESS = "main"


@dataclass
class Observation:
    """What a run saw of one value at one place: the last state seen there, and how often.

    ``name`` is the variable name or the expression's text; ``col`` the 0-based column where the
    value's expression ends (None when unknown). ``process`` is a short label such as ``"main"``,
    ``"rank 1"`` or ``"worker 0"``. ``last_run_id`` is filled in by the reader.
    """

    path: str
    line: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    requires_grad: bool
    grad_fn: Optional[str]
    hits: int = 1
    shape_varied: bool = False
    process: str = DEFAULT_PROCESS
    col: Optional[int] = None
    last_run_id: Optional[int] = None

    def __post_init__(self) -> None:
        # torch.Size, lists and numpy ints all become a plain tuple of ints.
        self.shape = tuple(int(d) for d in self.shape)

    @property
    def key(self) -> tuple[str, int, str, str]:
        """The identity of the row this observation updates."""
        return (self.path, self.line, self.name, self.process)


@dataclass(frozen=True)
class StoredFinding:
    """A rule's finding as stored for one run; ``tensors_json`` is the JSON list of tensors."""

    run_id: int
    rule: str
    path: str
    line: int
    message: str
    tensors_json: str
    process: str

    @property
    def tensors(self) -> list[dict[str, Any]]:
        """The tensors named in the finding, decoded from ``tensors_json``."""
        try:
            value = json.loads(self.tensors_json)
        except ValueError:
            return []
        return value if isinstance(value, list) else []


@dataclass(frozen=True)
class RunInfo:
    """One run that wrote the store. Times are seconds since the epoch; ``ended`` is None while
    the run is going (or when it died without saying so)."""

    run_id: int
    started: float
    ended: Optional[float]
    argv: list[str] = field(default_factory=list)
    cwd: str = ""
    exit_json: Optional[str] = None
    command: str = ""


def process_label(process: Any) -> str:
    """A short label for the process a finding or observation came from.

    Accepts a label string as is, or a dict such as ``{"rank": 1}``, ``{"worker": 0}``,
    ``{"rank": 1, "worker": 0}`` or ``{"label": "rank 1"}``; a child process with neither rank
    nor worker id (``{"pid": 42, "child": True}``) is ``"pid 42"``; anything else is ``"main"``.
    """
    if isinstance(process, str):
        return process.strip() or DEFAULT_PROCESS
    if not isinstance(process, dict):
        return DEFAULT_PROCESS
    label = process.get("label")
    if isinstance(label, str) and label.strip():
        return label.strip()
    parts = []
    rank = process.get("rank")
    if rank is not None:
        parts.append(f"rank {rank}")
    worker = process.get("worker", process.get("worker_id"))
    if worker is not None:
        parts.append(f"worker {worker}")
    if not parts and process.get("child") and process.get("pid") is not None:
        parts.append(f"pid {process['pid']}")
    return " ".join(parts) or DEFAULT_PROCESS
