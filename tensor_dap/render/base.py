"""The small value types a renderer returns: display text, child entries, a raw-view marker."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, TypeVar

T = TypeVar("T")


class Text(str):
    """A child's value that is already display text: shown as is (no quotes), not expandable."""

    __slots__ = ()


class Raw:
    """Marks "show this object's ordinary attributes" (the debugger's default view)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj


class Entry(NamedTuple):
    """One child: its name, its value (a :class:`Text` or a live object the frontend renders
    again), and the suffix that evaluates it from the parent's expression (``".shape"``) or
    ``None`` when it is computed."""

    name: str
    value: Any
    evaluate: Optional[str] = None


def safe(read: Callable[[], T], default: T) -> T:
    """``read()``, or ``default`` when it raises (broken subclasses raise anything)."""
    try:
        return read()
    except Exception:
        return default


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")
