"""The plain records that go into and come out of the trace store.

Writers (the agent, in the user's process and its workers) and readers (the language server) share
these dataclasses and the finding record (:class:`tensor_dap.findings.Finding`), nothing else: no
tensors, frames or sqlite rows cross the boundary, so either side can change its internals without
the other noticing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from tensor_dap.findings import process_tag

DEFAULT_PROCESS = "main"


@dataclass
class Observation:
    """What a run saw of one value at one place: the last state seen there, and how often.

    ``name`` is the variable name or the expression's text; ``col`` the 0-based column where the
    value's expression ends (None when unknown). ``process`` is a short label such as ``"main"``,
    ``"rank 1"`` or ``"worker 0"``. ``last_run_id`` is filled in by the reader.

    A value that is not a tensor (an ``nn.Module``, a list/tuple/dict of tensors) has a
    ``summary``, the hint text (``Sequential 161 params accel:0``), and a ``detail``, the
    markdown lines a hover adds; its ``shape`` is then empty and ``dtype``/``device`` list the
    distinct ones (``cpu+accel:0``). A tensor has neither.
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
    summary: Optional[str] = None
    detail: Optional[str] = None

    def __post_init__(self) -> None:
        # torch.Size, lists and numpy ints all become a plain tuple of ints.
        self.shape = tuple(int(d) for d in self.shape)

    @property
    def key(self) -> tuple[str, int, str, str]:
        """The identity of the row this observation updates."""
        return (self.path, self.line, self.name, self.process)


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

    @property
    def simulated(self) -> Optional[str]:
        """The device kind the run simulated (``--simulate cuda``), or None."""
        return simulated_kind(self.command)


#: in ``runs.command``, before the kind, for a run whose devices were simulated
SIMULATE_FLAG = "--simulate"


def run_command(command: str, simulated: Optional[str] = None) -> str:
    """A run's ``runs.command``: ``check``, or ``check --simulate cuda`` when its devices were
    simulated (what the user ran; the language server says so beside those devices)."""
    return f"{command} {SIMULATE_FLAG} {simulated}" if simulated else command


def simulated_kind(command: str) -> Optional[str]:
    """The kind :func:`run_command` put in ``command``, or None."""
    words = command.split()
    if SIMULATE_FLAG in words[:-1]:
        return words[words.index(SIMULATE_FLAG) + 1]
    return None


def process_label(process: Any) -> str:
    """The label of the process a finding or observation came from, as the store keeps it:
    :func:`~tensor_dap.findings.process_tag` with blanks between its words (``"rank 1 worker
    0"``), ``"main"`` for the process tensor-dap was started for."""
    return process_tag(process, separator=" ") or DEFAULT_PROCESS


def process_of_label(label: str) -> dict[str, Any]:
    """A stored label as a finding's ``process`` (:func:`process_label` gives it back)."""
    return {} if label == DEFAULT_PROCESS else {"label": label}
