"""The armed data breakpoints of this process, indexed by where their tensor's data lives.

Shared by the arming side (:mod:`tensor_dap.agent.data_watch`) and the write checks
(:mod:`tensor_dap.agent.data_write`). A write into a tensor is a write into an armed one when
both use the same storage (the tensor itself, a view of it, its ``.data`` alias: see
:func:`~tensor_dap.agent.storage.storage_key`) — an address lookup, no data read. Entries hold
weak references only.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from types import CodeType
from typing import Any, Hashable, Iterable, Optional

from tensor_dap.agent.storage import storage_key

HOOK_ID = "data-breakpoint"
"""The id the write checks are planned under (not a rule: no checkbox, no catalogue entry)."""


@dataclass(eq=False)
class Armed:
    """One armed data breakpoint."""

    data_id: str
    label: str
    ref: weakref.ref[Any]
    condition_text: str = ""
    condition: Optional[CodeType] = None


lock = threading.RLock()
#: data id -> the armed breakpoint
armed: dict[str, Armed] = {}
#: storage address -> the breakpoints on tensors with data there
by_storage: dict[Hashable, list[Armed]] = {}


def replace(breakpoints: dict[str, Armed]) -> None:
    """Arm exactly ``breakpoints``."""
    with lock:
        armed.clear()
        armed.update(breakpoints)
        rekey()


def remove(data_id: str) -> Optional[Armed]:
    with lock:
        gone = armed.pop(data_id, None)
        if gone is not None:
            rekey()
        return gone


def rekey() -> None:
    """Index by where each tensor's data is now (``.data = x`` moves it)."""
    with lock:
        index: dict[Hashable, list[Armed]] = {}
        for entry in armed.values():
            tensor = entry.ref()
            key = storage_key(tensor) if tensor is not None else None
            if key is not None:
                index.setdefault(key, []).append(entry)
        by_storage.clear()
        by_storage.update(index)


def armed_in(tensors: Iterable[Any]) -> list[Armed]:
    """The armed breakpoints on any of ``tensors`` (an optimizer's parameters)."""
    wanted = {id(a.ref()): a for a in list(armed.values()) if a.ref() is not None}
    return [wanted[id(t)] for t in tensors if id(t) in wanted]
