"""``optimizer-remade``: an optimizer with state is made again for the same parameters after each
step, so its state starts over at every step.

``opt = torch.optim.Adam(model.parameters())`` inside the training loop (or inside the function
one step calls) runs: each new Adam takes one step with fresh moments and step count 0, which
is a different optimizer from the one written (Adam's first, bias-corrected step moves every
weight by about ``lr`` times the sign of its gradient); SGD's momentum and LBFGS's history are
lost the same way. No error, and the loss may still go down. Reported at the line that makes
the optimizer, when it makes one for the same parameters as the one it made before and that one
took a single step which left it state (SGD without momentum keeps none: making it again costs
nothing). An optimizer made again per epoch or per task, each taking many steps, is fine.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from types import FrameType
from typing import Any

from tensor_dap import catalog
from tensor_dap.agent import frames, naming, optimizers
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.optimizers import Subscriber
from tensor_dap.agent.rules import Report
from tensor_dap.agent.rules.hooks import RuleState

RULE = catalog.rule("optimizer-remade")

#: rule_state key: the :class:`_Line` of each user line that made an optimizer
_LINES = "optimizer-remade.lines"


@dataclass(eq=False)
class _Line:
    """The last optimizer one line made: its parameters (ids: the model holds them, so an id
    names one tensor while both optimizers live), the steps it took (counted up to 2) and
    whether its first step left it state."""

    optimizer: weakref.ref[Any]
    params: frozenset[int]
    steps: int = 0
    stateful: bool = False
    kind: str = ""
    state_names: tuple[str, ...] = ()


def install(state: RuleState) -> list[Any]:
    lines: dict[tuple[str, int], _Line] = state.rule_state.setdefault(_LINES, {})
    #: id(optimizer) -> its line, while it has taken fewer than 2 steps (empty in a program
    #: that makes its optimizers once: a step then pays one truth test)
    counting: dict[int, _Line] = {}
    lock = threading.Lock()

    def made(optimizer: Any, caller: FrameType) -> None:
        if RULE.id not in state.enabled or RULE.id in state.failed:
            return
        try:
            user = frames.user_frame(caller)
            where = frames.site(user)
            if user is None or where is None or not frames.is_user_code(user.f_code):
                return
            params = frozenset(map(id, _params(optimizer)))
            with lock:
                before = lines.get(where)
                line = lines[where] = _Line(weakref.ref(optimizer), params)
                line.kind = type(optimizer).__name__
                counting[id(optimizer)] = line
                weakref.finalize(optimizer, counting.pop, id(optimizer), None)
            # (the one before took exactly one step, which left it state to lose)
            if before is not None and before.params == params and _one_step_lost(before):
                report = _report(user, before, optimizer)
                state._emit(RULE.id, report, OpInfo(line.kind), user)
        except Exception:
            state._rule_failed(RULE.id)

    def before_step(optimizer: Any, caller: FrameType) -> None:
        if not counting:
            return
        line = counting.get(id(optimizer))
        if line is None or line.optimizer() is not optimizer:
            return
        line.steps += 1
        if line.steps > 1:  # (not one step only: no longer counted)
            counting.pop(id(optimizer), None)

    def after_step(optimizer: Any) -> None:
        if not counting:
            return
        line = counting.get(id(optimizer))
        if line is None or line.optimizer() is not optimizer or line.steps != 1:
            return
        try:
            line.state_names = _state_names(optimizer)
            line.stateful = bool(line.state_names)
        except Exception:
            state._rule_failed(RULE.id)

    return [optimizers.subscribe(Subscriber(before_step, after_step, None, made))]


def _one_step_lost(line: _Line) -> bool:
    """The optimizer the line made before took exactly one step, which left it state."""
    return line.steps == 1 and line.stateful


def _params(optimizer: Any) -> list[Any]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def _state_names(optimizer: Any) -> tuple[str, ...]:
    """The names of what the optimizer keeps per parameter after a step (``exp_avg``,
    ``momentum_buffer``...), those holding a value; none for SGD without momentum."""
    names: dict[str, None] = {}
    for per_param in list(optimizer.state.values())[:64]:
        if isinstance(per_param, dict):
            names.update((str(k), None) for k, v in per_param.items() if v is not None)
    return tuple(names)


def _report(user: FrameType, before: _Line, optimizer: Any) -> Report:
    previous = before.optimizer()
    name = naming.object_name(user, previous) if previous is not None else None
    count = len(before.params)
    kept = ", ".join(before.state_names[:4])
    kind = before.kind
    first = next(iter(_params(optimizer)), None)

    def build(described: list[Any], expression: str) -> str:
        who = f"{name} is" if name else "the optimizer is"
        plural = "s" if count != 1 else ""
        return (
            f"`{expression}`: {who} made again at every step: the {kind} this line made "
            f"before, for the same {count} parameter{plural}, took one step, so {kind}'s state "
            f"({kept}) starts over each time and every step is its first. Make the optimizer "
            f"once, before the training loop."
        )

    tensors = [first] if first is not None else []
    return Report(tensors=tensors, message=build, operands=False, frame=user)
