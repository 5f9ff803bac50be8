"""``memory-limit``: live tensor memory on a device passes the limit the user set.

``tensor-dap check --memory-limit 6GiB``, the launch attribute ``"tensorMemoryLimit"``: the
rule keeps the books of live tensor memory (:class:`~tensor_dap.agent.memory.MemoryLedger`,
each op's results counted once per storage under the user line that made them) and reports
the op whose result takes a device past the limit, at its user line, naming the device, the
live total against the limit and the lines that made the tensors holding it. A device is
reported again only after its memory fell back under the limit. Off by default, and idle when
no limit is set, so a run without one pays nothing for it.
"""

from __future__ import annotations

from types import FrameType
from typing import Any, Optional

from tensor_dap import catalog
from tensor_dap.agent.memory import MemoryLedger, applies_before, note_backward, observe_op
from tensor_dap.agent.memory_table import live_table, table_text
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.rules import Report
from tensor_dap.agent.rules.hooks import Args, Kwargs
from tensor_dap.tensor_text import size_text

RULE = catalog.rule("memory-limit")

#: the option holding the limit, in bytes: ``{"memory-limit": {"bytes": N}}``
LIMIT_OPTION = "bytes"


def limit_of(options: dict[str, dict[str, Any]]) -> Optional[int]:
    """The limit set in a watch's ``options``, or None."""
    limit = options.get(RULE.id, {}).get(LIMIT_OPTION)
    return int(limit) if limit else None


#: the line of each ``backward()``, for the ``.grad`` tensors it makes (as the books do)
before = note_backward
__all__ = ["applies_before", "before", "after", "limit_of"]


def after(
    op: OpInfo, args: Args, kwargs: Kwargs, out: Any, caller: FrameType, state: Any
) -> Optional[Report]:
    ledger = state.memory
    if ledger is None:  # switched on while running (a checkbox): books from now on
        limit = limit_of(state.options)
        if limit is None:
            return None
        ledger = state.memory = MemoryLedger()
        ledger.limit = limit
    observe_op(op, args, kwargs, out, caller, state)
    crossed = ledger.crossed()
    if not crossed:
        return None
    device = crossed[0][0]
    live, rows = live_table(state, device)
    text = (
        f"live tensor memory on {device} is {size_text(live)}, past the limit of "
        f"{size_text(ledger.limit or 0)}. The tensors holding it were made at: {table_text(rows)}."
    )
    return Report(tensors=[], message=lambda _described, expression: f"`{expression}`: {text}")
