"""``zero_grad()`` between ``backward()`` and ``step()`` (part of ``grad-lost``).

``loss.backward(); optimizer.zero_grad(); optimizer.step()`` erases the gradients the backward
just computed: the step applies none (``set_to_none``, the default) or zeros, every step,
silently — the loss never moves. Per optimizer, the rule remembers how many ``backward()``
calls had run when its ``zero_grad()`` last ran and when its last ``step()`` ran; a step is
reported when a backward ran after the previous step, the zero_grad came after it, no backward
came since, and the gradients are still what the zero_grad left (a meta-learner or a
federated server sets ``p.grad`` by hand after its ``zero_grad()``: not erased). An
optimizer's first step is only remembered (the bug repeats: its second is reported). The
usual orders (zero_grad, backward, step; backward, step, zero_grad; gradient accumulation; a
closure that zeroes and backpropagates inside ``step(closure)``) never match.
"""

from __future__ import annotations

import os
import sys
import weakref
from types import FrameType
from typing import Any, Optional

from tensor_dap.agent import frames, naming
from tensor_dap.agent.rules import Report

#: rule_state keys: backward() calls so far and the line of the last; per optimizer (weakly)
#: the calls at its last zero_grad() (and that line) and at its last step()
_BACKWARDS = "grad-lost.backwards"
_BACKWARD_AT = "grad-lost.backward-at"
_ZEROED = "grad-lost.zeroed-at"
_STEPPED = "grad-lost.stepped-at"


def on_backward(state: Any, caller: Any) -> None:
    """A ``backward()`` from ``caller``: counted, its user line remembered."""
    rule_state = state.rule_state
    rule_state[_BACKWARDS] = rule_state.get(_BACKWARDS, 0) + 1
    user = frames.user_frame(caller)
    if user is not None:
        rule_state[_BACKWARD_AT] = (user.f_code.co_filename, user.f_lineno)


def zeroed(state: Any, optimizer: Any) -> None:
    """An optimizer's ``zero_grad()`` returned (``Subscriber.zeroed``): when, where, and what
    it left in each ``.grad`` (``None``, or a zeroed tensor and its version)."""
    user = frames.user_frame(sys._getframe(1))
    at = (user.f_code.co_filename, user.f_lineno) if user is not None else None
    left = _grads_now(optimizer)
    _table(state, _ZEROED)[optimizer] = (state.rule_state.get(_BACKWARDS, 0), at, left)


def _grads_now(optimizer: Any) -> list[Optional[tuple[int, int]]]:
    """Per parameter: ``None`` for no ``.grad``, else its ``id`` and version."""
    return [
        None if p.grad is None else (id(p.grad), p.grad._version)
        for group in optimizer.param_groups
        for p in group["params"]
    ]


def check(optimizer: Any, caller: FrameType, state: Any) -> Optional[Report]:
    """Before ``optimizer.step()``: the report when its gradients were zeroed after this
    step's backward (remembering this step either way)."""
    backwards = state.rule_state.get(_BACKWARDS, 0)
    stepped = _table(state, _STEPPED)
    previous = stepped.get(optimizer)
    stepped[optimizer] = backwards
    zeroed_at = _table(state, _ZEROED).get(optimizer)
    # (an optimizer's first step is only remembered: a new one's `zero_grad(); step()` to
    # start a scheduler after an earlier stage's backward() calls is no erasing)
    if zeroed_at is None or previous is None:
        return None
    count, at, left = zeroed_at
    if not (previous < count == backwards):
        return None
    if _grads_now(optimizer) != left:  # gradients set by hand since (Reptile, FedAvg, A3C)
        return None
    params = [p for group in optimizer.param_groups for p in group["params"]]
    user = frames.user_frame(caller)
    name = naming.object_name(user, optimizer) or "optimizer"
    backward_at = state.rule_state.get(_BACKWARD_AT)
    without = sum(1 for p in params if p.grad is None)
    step_at = (user.f_code.co_filename, user.f_lineno) if user is not None else None
    message = _message(name, backward_at, step_at, without, len(params))
    # (at the zero_grad() line, the one to move; paused at the step, where it shows)
    return Report(tensors=params[:4], message=message, operands=False, frame=user, at=at)


def _table(state: Any, key: str) -> Any:
    table = state.rule_state.get(key)
    if table is None:
        table = state.rule_state[key] = weakref.WeakKeyDictionary()
    return table


def _where(at: Optional[tuple[str, int]]) -> str:
    return f" at {os.path.basename(at[0])}:{at[1]}" if at is not None else ""


def _message(
    name: str,
    backward_at: Optional[tuple[str, int]],
    step_at: Optional[tuple[str, int]],
    without: int,
    total: int,
) -> Any:
    """Worded at the ``zero_grad()`` line (``expression``)."""

    def build(_described: list[Any], expression: str) -> str:
        applied = (
            f"{without} of {total} parameters have no gradient"
            if without
            else "the gradients it applies are zeros"
        )
        return (
            f"`{expression}` runs after backward(){_where(backward_at)} and before "
            f"{name}.step(){_where(step_at)}: it erases the gradients backward() computed, so "
            f"step() applies none ({applied}) and nothing learns. Call {name}.zero_grad() "
            f"before loss.backward() (or after {name}.step())."
        )

    return build
