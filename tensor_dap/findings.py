"""What a rule reports — a finding at a user's line, the tensors involved and the process — and
its one serialised form.

A finding crosses every process boundary tensor-dap has: from a child process to the parent of
a run (the findings log), from the debuggee to the debug adapter (inside the exception debugpy
stops on), into the trace store and out of it to the language server. All of them encode it
with :meth:`Finding.to_json` and decode it with :meth:`Finding.from_json`, which raises
:class:`MalformedFinding` for a record it cannot read: no reader parses a finding out of its
text. Plain data only (never a tensor, a frame or a code object) and no torch import: the
adapter and the language server load this module without loading torch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, TypeVar

T = TypeVar("T")


class MalformedFinding(ValueError):
    """A serialised finding that is not one: the message says which field is wrong."""


@dataclass(frozen=True)
class Origin:
    """Where a tensor was created: the user's line and the op that made it."""

    path: str
    line: int
    op: str

    def short(self) -> str:
        return f"{os.path.basename(self.path)}:{self.line} by {self.op}"

    @classmethod
    def from_json(cls, data: Any) -> Origin:
        record = _record(data, "a tensor's origin")
        return cls(
            path=_text(record, "path"), line=_integer(record, "line"), op=_text(record, "op")
        )


@dataclass
class TensorInfo:
    """A tensor named in a finding, described without its data."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    requires_grad: bool = False
    grad_fn: Optional[str] = None
    origin: Optional[Origin] = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["shape"] = list(self.shape)
        return data

    @classmethod
    def from_json(cls, data: Any) -> TensorInfo:
        record = _record(data, "a tensor")
        shape = record.get("shape")
        if not isinstance(shape, list) or not all(_is_integer(d) for d in shape):
            raise MalformedFinding(f"a tensor's 'shape' is {shape!r}, not a list of integers")
        grad_fn = record.get("grad_fn")
        origin = record.get("origin")
        return cls(
            name=_text(record, "name"),
            shape=tuple(shape),
            dtype=_text(record, "dtype"),
            device=_text(record, "device"),
            requires_grad=bool(record.get("requires_grad")),
            grad_fn=None if grad_fn is None else str(grad_fn),
            origin=None if origin is None else Origin.from_json(origin),
        )


@dataclass
class Finding:
    """One problem a rule found, reported at the user's line that caused it.

    ``process`` says which process of a run it came from (see :func:`process_tag`): ``{"pid":
    ..., "rank": 1, "worker": 0, "child": True}`` as the agent knows it, or ``{"label": "rank
    1"}`` as the trace store keeps it.
    """

    rule: str
    path: str
    line: int
    message: str
    tensors: list[TensorInfo] = field(default_factory=list)
    process: dict[str, Any] = field(default_factory=dict)

    @property
    def tag(self) -> str:
        """The process it came from, ``"rank 1"``; ``""`` for the process tensor-dap started."""
        return process_tag(self.process)

    def tagged_message(self) -> str:
        """The message, behind ``[rank 1]`` when it came from a rank, worker or child."""
        return f"[{self.tag}] {self.message}" if self.tag else self.message

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "path": self.path,
            "line": self.line,
            "message": self.message,
            "tensors": [t.to_json() for t in self.tensors],
            "process": dict(self.process),
        }

    @classmethod
    def from_json(cls, data: Any) -> Finding:
        """The finding ``to_json`` gave; :class:`MalformedFinding` for anything else."""
        record = _record(data, "a finding")
        tensors = record.get("tensors") or []
        if not isinstance(tensors, list):
            raise MalformedFinding(f"a finding's 'tensors' is {tensors!r}, not a list")
        process = record.get("process") or {}
        if not isinstance(process, Mapping):
            raise MalformedFinding(f"a finding's 'process' is {process!r}, not an object")
        return cls(
            rule=_text(record, "rule"),
            path=_text(record, "path"),
            line=_integer(record, "line"),
            message=_text(record, "message"),
            tensors=[TensorInfo.from_json(t) for t in tensors],
            process=dict(process),
        )

    def dumps(self) -> str:
        """``to_json`` as compact JSON text."""
        return json.dumps(self.to_json(), separators=(",", ":"), default=str)

    @classmethod
    def loads(cls, text: str) -> Finding:
        """The finding ``dumps`` wrote; :class:`MalformedFinding` for other text."""
        try:
            data = json.loads(text)
        except ValueError as error:
            raise MalformedFinding(f"a finding is not JSON: {error}") from error
        return cls.from_json(data)


def process_tag(process: Any, separator: str = ", ") -> str:
    """Which process of a run a finding or an observation came from, in a few words.

    ``"rank 1, worker 0"`` for ``{"rank": 1, "worker": 0}`` (``worker_id`` is read as
    ``worker``), ``"pid 4242"`` for a child process with neither (``{"pid": 4242, "child":
    True}``), ``""`` for the process tensor-dap was started for. A label (a string, or
    ``{"label": "rank 1"}``: what the trace store keeps) is its own tag.
    """
    if isinstance(process, str):
        return process.strip()
    if not isinstance(process, Mapping):
        return ""
    label = process.get("label")
    if isinstance(label, str) and label.strip():
        return label.strip()
    rank, worker = process.get("rank"), process.get("worker", process.get("worker_id"))
    parts = [f"{n} {v}" for n, v in (("rank", rank), ("worker", worker)) if v is not None]
    if not parts and process.get("child") and process.get("pid") is not None:
        parts.append(f"pid {process['pid']}")
    return separator.join(parts)


STOP_MARKER = "\ntensor-dap finding: "
"""Between the text of the exception the debugger stops on and the finding it carries."""


def stop_description(finding: Finding) -> str:
    """What the editor shows for a stop on ``finding``: ``Paused on RULE: [rank 1] message``."""
    return f"Paused on {finding.rule}: {finding.tagged_message()}"


def stop_text(finding: Finding) -> str:
    """The text of the exception the debugger stops on: what a person should read
    (``Paused on RULE: message``), then the finding itself for the debug adapter.

    debugpy sends an exception's text as the stop's ``description`` and ``exceptionInfo``'s,
    through whichever adapter the client attached with (a subprocess's stop reaches the
    client's second adapter, not the one its agent's channel talks to), so the finding travels
    with the stop. The JSON holds no raw newline: the last marker is the one written here.
    """
    return f"{stop_description(finding)}{STOP_MARKER}{finding.dumps()}"


def finding_in_stop(text: Any) -> Optional[Finding]:
    """The finding :func:`stop_text` put in ``text``; ``None`` for another exception's text,
    :class:`MalformedFinding` for a damaged one."""
    _, marker, payload = str(text or "").rpartition(STOP_MARKER)
    return Finding.loads(payload) if marker else None


def _record(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise MalformedFinding(f"{what} is {type(data).__name__}, not a JSON object")
    return data


def _text(record: Mapping[str, Any], key: str) -> str:
    return _field(record, key, str, "a string")


def _integer(record: Mapping[str, Any], key: str) -> int:
    return _field(record, key, int, "an integer")


def _field(record: Mapping[str, Any], key: str, kind: type[T], what: str) -> T:
    value = record.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        if key not in record:
            raise MalformedFinding(f"a finding record without {key!r}")
        raise MalformedFinding(f"a finding record's {key!r} is {value!r}, not {what}")
    return value


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
