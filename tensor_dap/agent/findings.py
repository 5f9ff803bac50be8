"""What a rule reports: a finding at a user's line, and the tensors involved with their origin.

These records cross process boundaries (JSON report, trace store, the adapter's agent channel),
so they hold plain data only: never a tensor, a frame or a code object.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class Origin:
    """Where a tensor was created: the user's line and the op that made it."""

    path: str
    line: int
    op: str

    def short(self) -> str:
        from os.path import basename

        return f"{basename(self.path)}:{self.line} by {self.op}"


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


@dataclass
class Finding:
    """One problem a rule found, reported at the user's line that caused it."""

    rule: str
    path: str
    line: int
    message: str
    tensors: list[TensorInfo] = field(default_factory=list)
    process: dict[str, Any] = field(default_factory=dict)

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
    def from_json(cls, data: dict[str, Any]) -> Finding:
        tensors = []
        for t in data.get("tensors", []):
            origin = t.get("origin")
            tensors.append(
                TensorInfo(
                    name=t["name"],
                    shape=tuple(t["shape"]),
                    dtype=t["dtype"],
                    device=t["device"],
                    requires_grad=bool(t.get("requires_grad")),
                    grad_fn=t.get("grad_fn"),
                    origin=Origin(**origin) if origin else None,
                )
            )
        return cls(
            rule=data["rule"],
            path=data["path"],
            line=int(data["line"]),
            message=data["message"],
            tensors=tensors,
            process=dict(data.get("process", {})),
        )
