"""``optimizer-remade``: an optimizer with state is made again for the same parameters after each
step, so its state starts over at every step.

``opt = torch.optim.Adam(model.parameters())`` inside the training loop (or inside the function
one step calls) runs: each new Adam takes one step with fresh moments and step count 0, which
is a different optimizer from the one written (Adam's first, bias-corrected step moves every
weight by about ``lr`` times the sign of its gradient); SGD's momentum and LBFGS's history are
lost the same way. No error, and the loss may still go down.

Found at the first step of an optimizer made at a line (and for a first parameter) where the
one made before, for the very same parameters, took a single step which left it state (SGD
without momentum keeps none: making it again costs nothing); reported at the line that makes
it, paused at that step. Not when the new one was given a state first (``load_state_dict``), nor
for an LBFGS whose one ``step(closure)`` is a whole fit. An optimizer made again per epoch or per
task, each taking many steps, is fine; so are optimizers made for new parameters each time.
"""

from __future__ import annotations

import os
import threading
import weakref
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Optional

import torch

from tensor_dap import catalog
from tensor_dap.agent import frames, naming, optimizers
from tensor_dap.agent.optimizers import Subscriber
from tensor_dap.agent.rules import Report, _step
from tensor_dap.agent.rules.hooks import RuleState
from tensor_dap.agent.tensor_map import TensorMap

RULE = catalog.rule("optimizer-remade")

#: rule_state key: an optimizer's first parameter -> the :class:`_Made` of the last optimizer
#: made with it first (a TensorMap: weak, and out of ``swap_tensors``' way)
_MADE = "optimizer-remade.made"


@dataclass(eq=False)
class _Made:
    """One optimizer made at a user line: how many parameters it has, the steps it took
    (counted up to 2), what its first step left it, and the newest optimizer made there before
    it for the same parameters that stepped (if that one took a single step that left it state,
    this one's first step is reported)."""

    optimizer: weakref.ref[Any]
    #: how many parameters it has (its first is the key of :data:`_MADE`)
    count: int
    where: tuple[str, int]
    kind: str
    #: ``id()`` of its ``state`` dict as made: ``load_state_dict`` replaces the dict
    state_made: int
    steps: int = 0
    state_names: tuple[str, ...] = ()
    #: the newest optimizer made at its line before it that stepped (those made in between,
    #: never stepped, skipped: a gradient accumulation making one per micro-batch); let go at
    #: this one's first step
    stepped_before: Optional[_Made] = field(default=None, repr=False)
    #: made in a function of the user's (a ``configure_optimizers()``, a ``make_optimizer(net)``
    #: helper): its code and the user line that called it
    maker: Optional[tuple[Any, tuple[str, int]]] = field(default=None, repr=False)
    #: its groups' learning rates as made (numbers only): one made again with another (a poly
    #: or warm-up schedule applied by re-making it) is told how to change the rate instead
    lrs: tuple[Optional[float], ...] = ()


def install(state: RuleState) -> list[Any]:
    made_with: TensorMap[_Made] = state.rule_state.setdefault(_MADE, TensorMap())
    #: id(optimizer) -> what it is, while it has taken fewer than 2 steps (empty in a program
    #: that makes its optimizers once: a step then pays one truth test)
    counting: dict[int, _Made] = {}
    lock = threading.Lock()

    def made(optimizer: Any, caller: FrameType) -> None:
        if RULE.id not in state.enabled or RULE.id in state.failed:
            return
        try:
            user = frames.user_frame(_outside_its_init(caller, optimizer))
            where = frames.site(user)
            if user is None or where is None or not frames.is_user_code(user.f_code):
                return
            params = _step.params(optimizer)
            if not params:
                return
            kind = type(optimizer).__name__
            this = _Made(weakref.ref(optimizer), len(params), where, kind, id(optimizer.state))
            this.maker = _maker(user)
            this.lrs = _learning_rates(optimizer)
            with lock:
                before = made_with.get(params[0])
                made_with.set(params[0], this)
                counting[id(optimizer)] = this
                weakref.finalize(optimizer, counting.pop, id(optimizer), None)
            if before is not None and (before.where, before.count) != (where, len(params)):
                before = None  # (made elsewhere, or for other parameters)
            if before is not None and not before.steps:
                before = before.stepped_before
            this.stepped_before = before
        except Exception:
            state._rule_failed(RULE.id)

    def before_step(optimizer: Any, caller: FrameType) -> None:
        if not counting:
            return
        this = counting.get(id(optimizer))
        if this is None or this.optimizer() is not optimizer:
            return
        this.steps += 1
        if this.steps > 1:  # (not one step only: no longer counted)
            counting.pop(id(optimizer), None)
            return
        previous, this.stepped_before = this.stepped_before, None
        # (the one before, for these parameters, took one step that left it state; this one
        # was not given a state since: load_state_dict)
        if previous is None or not _one_step_lost(previous):
            return
        if id(getattr(optimizer, "state", None)) != this.state_made:
            return
        if RULE.id not in state.enabled or RULE.id in state.failed:
            return
        try:
            report = _report(frames.user_frame(caller), this, previous)
            state._emit(RULE.id, report, _step.STEP, caller)
        except Exception:
            state._rule_failed(RULE.id)

    def after_step(optimizer: Any) -> None:
        if not counting:
            return
        this = counting.get(id(optimizer))
        if this is None or this.optimizer() is not optimizer or this.steps != 1:
            return
        try:
            whole_fit = optimizers.closure_step() and _iterates(optimizer)
            this.state_names = () if whole_fit else _state_names(optimizer)
        except Exception:
            state._rule_failed(RULE.id)

    return [optimizers.subscribe(Subscriber(before_step, after_step, None, made))]


def _outside_its_init(caller: FrameType, optimizer: Any) -> Optional[FrameType]:
    """The frame above the ``__init__`` methods making ``optimizer`` (a project's own optimizer
    class calling ``super().__init__``)."""
    frame: Optional[FrameType] = caller
    while frame is not None and frame.f_code.co_name == "__init__":
        if frames.read_locals(frame).get("self") is not optimizer:
            break
        frame = frame.f_back
    return frame


def _maker(user: FrameType) -> Optional[tuple[Any, tuple[str, int]]]:
    """The function of the user's making the optimizer, and the user line calling it; None at
    a module's top level or called from outside the user's code."""
    code, caller = user.f_code, user.f_back
    if code.co_name == "<module>" or caller is None or not frames.is_user_code(caller.f_code):
        return None
    site = frames.site(caller)
    return (code, site) if site is not None else None


def _iterates(optimizer: Any) -> bool:
    """One ``step(closure)`` of it is a whole fit: LBFGS's ``max_iter`` iterations."""
    groups = optimizer.param_groups
    return isinstance(optimizer, torch.optim.LBFGS) and bool(groups) and groups[0]["max_iter"] > 1


def _learning_rates(optimizer: Any) -> tuple[Optional[float], ...]:
    """Each group's ``lr`` when a Python number (a tensor's is not read: that could sync)."""
    rates = (group.get("lr") for group in optimizer.param_groups)
    return tuple(
        float(lr) if isinstance(lr, (int, float)) and not isinstance(lr, bool) else None
        for lr in rates
    )


def _one_step_lost(made: _Made) -> bool:
    """The optimizer took exactly one step, which left it state."""
    return made.steps == 1 and bool(made.state_names)


def _state_names(optimizer: Any) -> tuple[str, ...]:
    """The names of what the optimizer keeps per parameter after a step (``exp_avg``,
    ``momentum_buffer``...), those holding a value; none for SGD without momentum."""
    names: dict[str, None] = {}
    for per_param in list(optimizer.state.values())[:64]:
        if isinstance(per_param, dict):
            names.update((str(k), None) for k, v in per_param.items() if v is not None)
    return tuple(names)


def _report(user: Optional[FrameType], this: _Made, previous: _Made) -> Report:
    optimizer = this.optimizer()
    name = naming.object_name(user, optimizer) if optimizer is not None else None
    count = previous.count
    kept = ", ".join(previous.state_names[:4])
    kind = previous.kind
    step_at = frames.site(user)
    # (made by a function the stepping code does not run itself: the line calling it is the
    # one to move, as Lightning-style code calling self.configure_optimizers() each step)
    maker = this.maker
    helper = maker is not None and user is not None and maker[0] is not user.f_code

    def build(described: list[Any], expression: str) -> str:
        who = f"`{name}`" if name else "the optimizer"
        plural = "s" if count != 1 else ""
        at = f" at {os.path.basename(step_at[0])}:{step_at[1]}" if step_at is not None else ""
        fix = "Make the optimizer once, before the training loop."
        if helper and maker is not None:
            fix = (
                f"It is made in {maker[0].co_name}(), which {naming.place(*maker[1])} calls at "
                f"every step: call it once, before the training loop, and keep what it returns."
            )
        if this.lrs != previous.lrs and any(lr is not None for lr in this.lrs):
            held = name or "optimizer"
            fix += (
                f" Its learning rate changes from one to the next: keep the one optimizer and "
                f"set `{held}.param_groups[i]['lr']` (or use a scheduler of "
                f"torch.optim.lr_scheduler), which keeps its state."
            )
        return (
            f"`{expression}`: {who} is made again at every step: the {kind} this line made "
            f"before, for the same {count} parameter{plural}, took one step, and each new one "
            f"starts with no state ({kept}), so every step (step(){at}) is a new {kind}'s "
            f"first. {fix}"
        )

    params = _step.params(optimizer) if optimizer is not None else []
    tensors = params[:1]
    return Report(tensors=tensors, message=build, operands=False, frame=user, at=this.where)
