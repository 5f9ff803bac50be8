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
closure that zeroes and backpropagates inside ``step(closure)``) never match. A model's own
``zero_grad()`` (``net.zero_grad()``) erases them the same way: it is remembered per module with
what it left in each parameter's ``.grad``, and a step over some of those parameters is checked
against it. A ``zero_grad(set_to_none=False)`` leaves zeros, which gradient clipping or a
``GradScaler``'s unscaling then scale in place (``_foreach_mul_``): still zeros, still erased (a
write of anything else is a gradient set by hand).
"""

from __future__ import annotations

import os
import sys
import weakref
from types import FrameType
from typing import Any, Iterable, Optional

from tensor_dap.agent import frames, naming
from tensor_dap.agent.rules import Report

#: rule_state keys: backward() calls so far and the line of the last; per optimizer (weakly)
#: the calls at its last zero_grad() (and that line) and at its last step()
_BACKWARDS = "grad-lost.backwards"
_BACKWARD_AT = "grad-lost.backward-at"
_ZEROED = "grad-lost.zeroed-at"
_STEPPED = "grad-lost.stepped-at"
_MODULE_ZEROED = "grad-lost.module-zeroed-at"
#: backward() calls when any zero_grad() (an optimizer's or a module's) last ran: a step
#: with none since its backward (every step of the usual orders) is passed at once
_ANY_ZEROED = "grad-lost.any-zeroed-at"
#: id of a gradient a zero_grad(set_to_none=False) left as zeros -> its versions since made by
#: scaling it in place (clipping, unscaling), which leaves zeros zeros
_SCALED = "grad-lost.scaled-zeros"

#: in-place ops that scale their tensors (a zero stays zero): the first argument, or each of
#: a list's
SCALINGS = frozenset(
    {
        "mul_",
        "div_",
        "__imul__",
        "__itruediv__",
        "_foreach_mul_",
        "_foreach_div_",
        "_amp_foreach_non_finite_check_and_unscale_",
    }
)


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
    at = frames.site(user)
    left = _grads_now(optimizer)
    backwards = state.rule_state[_ANY_ZEROED] = state.rule_state.get(_BACKWARDS, 0)
    _table(state, _ZEROED)[optimizer] = (backwards, at, left)
    _follow_zeros(state, left)


def module_zeroed(state: Any, module: Any, caller: FrameType) -> None:
    """A module's ``zero_grad()`` returned (:mod:`tensor_dap.agent.module_zero_grad`): as
    :func:`zeroed`, per parameter of the module (an optimizer stepping them is known later)."""
    user = frames.user_frame(caller)
    at = frames.site(user)
    params = list(module.parameters())
    left = dict(zip(map(id, params), _grads_of(params)))
    backwards = state.rule_state[_ANY_ZEROED] = state.rule_state.get(_BACKWARDS, 0)
    _table(state, _MODULE_ZEROED)[module] = (backwards, at, left)
    _follow_zeros(state, left.values())


def _follow_zeros(state: Any, left: Iterable[Optional[tuple[int, int]]]) -> None:
    """The gradients a ``zero_grad()`` left as zero tensors (``set_to_none=False``) are
    followed through in-place scaling (:func:`scaled`)."""
    zeros = [grad for grad, _ in filter(None, left)]
    if zeros:
        scaled = state.rule_state.setdefault(_SCALED, {})
        scaled.update(dict.fromkeys(zeros, 0))


def scaled(args: Any, state: Any) -> None:
    """An in-place scaling op (:data:`SCALINGS`) ran on ``args[0]`` (a tensor or a list): the
    zeros among them are still zeros."""
    followed = state.rule_state.get(_SCALED)
    if not followed or not args:
        return
    targets = args[0] if isinstance(args[0], (list, tuple)) else (args[0],)
    for tensor in targets:
        times = followed.get(id(tensor))
        if times is not None:
            followed[id(tensor)] = times + 1


def _grads_now(optimizer: Any, state: Any = None) -> list[Optional[tuple[int, int]]]:
    """Per parameter: ``None`` for no ``.grad``, else its ``id`` and version (see
    :func:`_grads_of`)."""
    return _grads_of((p for group in optimizer.param_groups for p in group["params"]), state)


def _grads_of(params: Iterable[Any], state: Any = None) -> list[Optional[tuple[int, int]]]:
    """Per parameter: ``None`` for no ``.grad``, else its ``id`` and version — less the versions
    in-place scaling of zeros made, given the watch's ``state``."""
    grads = [None if p.grad is None else (id(p.grad), p.grad._version) for p in params]
    followed = state.rule_state.get(_SCALED) if state is not None else None
    if not followed:
        return grads
    return [g if g is None else (g[0], g[1] - followed.get(g[0], 0)) for g in grads]


def check(optimizer: Any, caller: FrameType, state: Any, failing: bool = False) -> Optional[Report]:
    """Before ``optimizer.step()``: the report when its gradients were zeroed after this
    step's backward, by the optimizer's ``zero_grad()`` or its model's (remembering this step
    either way). ``failing``: the step is about to raise for want of gradients (a
    ``GradScaler``'s), so its first is reported too."""
    backwards = state.rule_state.get(_BACKWARDS, 0)
    stepped = _table(state, _STEPPED)
    previous = stepped.get(optimizer)
    stepped[optimizer] = backwards
    # (an optimizer's first step is only remembered: a new one's `zero_grad(); step()` to
    # start a scheduler after an earlier stage's backward() calls is no erasing)
    if previous is None and failing:
        previous = -1
    zeroed_since = state.rule_state.get(_ANY_ZEROED) == backwards
    if previous is None or not previous < backwards or not zeroed_since:
        _forget_zeros(optimizer, state)
        return None
    params = [p for group in optimizer.param_groups for p in group["params"]]
    erased = _erased_by_optimizer(optimizer, backwards, state)
    erased = erased if erased is not None else _erased_by_module(params, backwards, state)
    _forget_zeros(optimizer, state)
    if erased is None:
        return None
    at, zeroer = erased
    user = frames.user_frame(caller)
    name = naming.object_name(user, optimizer) or "optimizer"
    if zeroer is not None:  # (a module the user's code names no way: `m[0].zero_grad()`)
        zeroer = naming.object_name(user, zeroer) or ""
    backward_at = state.rule_state.get(_BACKWARD_AT)
    without = sum(1 for p in params if p.grad is None)
    step_at = frames.site(user)
    zeroer = name if zeroer is None else zeroer
    message = _message(name, zeroer, backward_at, step_at, without, len(params), failing)
    # (at the zero_grad() line, the one to move; paused at the step, where it shows)
    return Report(tensors=params[:4], message=message, operands=False, frame=user, at=at)


def _forget_zeros(optimizer: Any, state: Any) -> None:
    """The step used its gradients: their scaling since the zero_grad is no longer followed."""
    followed = state.rule_state.get(_SCALED)
    if followed:
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    followed.pop(id(param.grad), None)


def _erased_by_optimizer(optimizer: Any, backwards: int, state: Any) -> Optional[tuple[Any, None]]:
    """(the line of the optimizer's ``zero_grad()``, None) when it ran after the last backward
    and the gradients are still what it left."""
    zeroed_at = _table(state, _ZEROED).get(optimizer)
    if zeroed_at is None:
        return None
    count, at, left = zeroed_at
    # (gradients set by hand since the zero_grad: Reptile, FedAvg, A3C)
    if count != backwards or _grads_now(optimizer, state) != left:
        return None
    return at, None


def _erased_by_module(params: list[Any], backwards: int, state: Any) -> Optional[tuple[Any, Any]]:
    """(the line of a module's ``zero_grad()``, the module) when modules' ``zero_grad()`` ran
    after the last backward, their gradients are still what they left, and the step has no
    other gradient to apply (a frozen backbone's gradients cleared so that the step updates
    the head alone is meant: not reported)."""
    left: dict[int, Optional[tuple[int, int]]] = {}
    stepped = {id(p) for p in params}
    first = None
    for module, (count, at, grads) in list(_table(state, _MODULE_ZEROED).items()):
        if count == backwards and not stepped.isdisjoint(grads):
            left.update(grads)
            first = first or (at, module)  # (the first that zeroed some of these parameters)
    mine = [p for p in params if id(p) in left]
    if first is None or any(p.grad is not None for p in params if id(p) not in left):
        return None
    return first if _grads_of(mine, state) == [left[id(p)] for p in mine] else None


def _table(state: Any, key: str) -> Any:
    table = state.rule_state.get(key)
    if table is None:
        table = state.rule_state[key] = weakref.WeakKeyDictionary()
    return table


def _where(at: Optional[tuple[str, int]]) -> str:
    return f" at {os.path.basename(at[0])}:{at[1]}" if at is not None else ""


def _message(
    name: str,
    zeroer: str,
    backward_at: Optional[tuple[str, int]],
    step_at: Optional[tuple[str, int]],
    without: int,
    total: int,
    failing: bool = False,
) -> Any:
    """Worded at the ``zero_grad()`` line (``expression``)."""

    def build(_described: list[Any], expression: str) -> str:
        applied = (
            f"{without} of {total} parameters have no gradient"
            if without
            else "the gradients it applies are zeros"
        )
        step = f"the GradScaler's step({name})" if failing else f"{name}.step()"
        move = f"Call {zeroer}.zero_grad()" if zeroer else "Move it"
        return (
            f"`{expression}` runs after backward(){_where(backward_at)} and before "
            f"{step}{_where(step_at)}: it erases the gradients backward() computed, so "
            f"step() applies none ({applied}) and nothing learns"
            + (
                " (a GradScaler's step() raises 'No inf checks were recorded for this "
                "optimizer' for it)"
                if failing
                else ""
            )
            + f". {move} before loss.backward() (or after {name}.step())."
        )

    return build
