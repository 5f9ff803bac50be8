"""What the rules that check at ``optimizer.step()`` share (``grad-lost``'s parameters without
gradient, ``missing-zero-grad``): the hook :mod:`tensor_dap.agent.optimizers` calls before each
step, turned into findings at the step's line."""

from __future__ import annotations

import re
from types import FrameType
from typing import Any, Callable, Optional

from tensor_dap.agent import naming
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.rules import Report
from tensor_dap.agent.rules.hooks import RuleState

#: the op a step's finding is reported for
STEP = OpInfo("step")


def before_step(
    rule_id: str, state: RuleState, check: Callable[[Any, FrameType], Optional[Report]]
) -> Callable[[Any, FrameType], None]:
    """A ``Subscriber.before_step`` that runs ``check(optimizer, caller)`` while the rule is on:
    its report is a finding at the line that called ``step()``; raising switches the rule
    off."""

    def hook(optimizer: Any, caller: FrameType) -> None:
        if rule_id not in state.enabled or rule_id in state.failed:
            return
        try:
            report = check(optimizer, caller)
            if report is not None:
                state._emit(rule_id, report, STEP, caller)
        except Exception:
            state._rule_failed(rule_id)

    return hook


def params(optimizer: Any) -> list[Any]:
    """Every parameter ``optimizer`` steps, in its groups' order."""
    return [p for group in optimizer.param_groups for p in group["params"]]


#: ``U.backward()`` on a line (no positional argument: ``accelerator.backward(loss)`` and
#: ``torch.autograd.backward(loss)`` are other calls): the name or attribute path it is called on
_RECEIVER = re.compile(r"(?<![\w.])([A-Za-z_][\w.]*)\.backward\(\s*(?:\)|[A-Za-z_]\w*\s*=)")


def backward_call(at: Optional[tuple[str, int]]) -> str:
    """How the program's ``backward()`` call at ``at`` (path, line) reads, for advice:
    ``U.backward()`` when it is called on a name there, else ``loss.backward()``
    (``scaler.scale(loss).backward()``, an expression, or no single line known)."""
    found = _RECEIVER.search(naming.source_line(*at)) if at is not None else None
    return f"{found.group(1)}.backward()" if found else "loss.backward()"
