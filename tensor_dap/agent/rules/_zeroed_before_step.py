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

A ``zero_grad()`` that runs after the step's backward and is followed by another backward
(an attack or a saliency helper called between ``loss.backward()`` and ``optimizer.step()``
every few steps: ``model.zero_grad(); attack_loss.backward()``) makes the step apply the other
backward's gradients: reported when the erased backward is the one the optimizer's previous
step applied and the applied one is not (SAM's and PCGrad's second passes, a GAN's other
network's backward, a per-task backward before the total's, never match).
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import weakref
from types import FrameType
from typing import Any, Iterable, Optional

from tensor_dap.agent import frames, naming
from tensor_dap.agent.rules import Report, _step
from tensor_dap.agent.tensor_map import TensorMap

#: rule_state keys: backward() calls so far and the line of the last; per optimizer (weakly)
#: its :class:`_Record`; per module (weakly) what its last zero_grad() left
_BACKWARDS = "grad-lost.backwards"
_BACKWARD_AT = "grad-lost.backward-at"
_RECORDS = "grad-lost.optimizer-records"
_MODULE_ZEROED = "grad-lost.module-zeroed-at"
#: backward() calls when any zero_grad() (an optimizer's or a module's) last ran: a step
#: with none since its backward (every step of the usual orders) is passed at once
_ANY_ZEROED = "grad-lost.any-zeroed-at"
#: id of a gradient a zero_grad(set_to_none=False) left as zeros -> its versions since made by
#: scaling it in place (clipping, unscaling), which leaves zeros zeros
_SCALED = "grad-lost.scaled-zeros"

#: the newest backward() calls: (its number, its user line, the line calling that one, the
#: thread running it)
_BACKWARD_LINES = "grad-lost.backward-lines"
_KEPT_BACKWARDS = 8
#: the newest zero_grad()'s user frames, innermost first, as (code, line)
_ZERO_CALLS = "grad-lost.zero-calls"
_CALL_DEPTH = 4


class _Record:
    """What the rule remembers of one optimizer, in one object: a step reads and writes most
    of it, and one table lookup per step is what the usual orders pay (not one per field)."""

    __slots__ = ("stepped", "zeroed", "applied", "probe", "probe_grad", "untouched")

    def __init__(self) -> None:
        #: backward() calls at its last step() (None before its first)
        self.stepped: Optional[int] = None
        #: (backward() calls, its line, what it left in each .grad) at its last zero_grad()
        #: that came after a backward()
        self.zeroed: Optional[tuple[int, Any, list[Optional[tuple[int, int]]]]] = None
        #: the user line of the backward() its last step applied
        self.applied: Optional[tuple[str, int]] = None
        #: its first parameter with a gradient at its last step, and that gradient -> its
        #: version then (weakly, by the object: the next gradient of the parameter, made after
        #: ``zero_grad()`` freed this one, often gets its id)
        self.probe: Optional[Any] = None
        self.probe_grad: TensorMap[int] = TensorMap()
        #: whether its zero_grad() found that gradient as the step left it (no backward() since
        #: wrote into its parameters: the backward() calls between were other optimizers', a
        #: deep ensemble's members trained side by side from one loop line)
        self.untouched = False


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


def step_backward_at(state: Any) -> Optional[tuple[str, int]]:
    """(path, line) of the first ``backward()`` this thread ran since the newest step of any
    optimizer before it, when grad-lost is on and it is known: where advice places a
    ``zero_grad()``. A discriminator's two (``errD_real.backward(); errD_fake.backward()``)
    name the first; a GAN's ``lossD.backward()`` and ``lossG.backward()`` each its own
    optimizer's; with the first of them no longer kept, the one line they all ran from, if
    they did."""
    lines = state.rule_state.get(_BACKWARD_LINES, ())
    backwards = state.rule_state.get(_BACKWARDS, 0)
    since = max((n for n in _steps_taken(state) if n < backwards), default=0)
    thread = threading.get_ident()
    kept: list[tuple[int, tuple[str, int]]] = [
        (number, at) for number, at, _, ident in lines if ident == thread
    ]
    run = [(number, at) for number, at in kept if number > since]
    if not run:
        return None
    if run[0][0] == since + 1 or len(run) < len(kept):  # (the first since the step is kept)
        return run[0][1]
    ats = {at for _, at in run}
    return next(iter(ats)) if len(ats) == 1 else None


def on_backward(state: Any, caller: Any) -> None:
    """A ``backward()`` from ``caller``: counted, its user line remembered."""
    rule_state = state.rule_state
    rule_state[_BACKWARDS] = rule_state.get(_BACKWARDS, 0) + 1
    user = frames.user_frame(caller)
    if user is not None:
        at = rule_state[_BACKWARD_AT] = (user.f_code.co_filename, user.f_lineno)
        lines = rule_state.get(_BACKWARD_LINES)
        if lines is None:
            lines = rule_state[_BACKWARD_LINES] = collections.deque(maxlen=_KEPT_BACKWARDS)
        # (and the line calling it: a helper's one backward() line serves SAM's two passes)
        thread = threading.get_ident()
        lines.append((rule_state[_BACKWARDS], at, frames.site(user.f_back), thread))


def _remember_zero_call(state: Any, user: Optional[FrameType]) -> None:
    """The zero_grad()'s user frames (a helper's ``model.zero_grad()``, the loop's call)."""
    calls: list[tuple[Any, int]] = []
    while user is not None and len(calls) < _CALL_DEPTH:
        if frames.is_user_code(user.f_code):
            calls.append((user.f_code, user.f_lineno))
        user = user.f_back
    state.rule_state[_ZERO_CALLS] = calls


def zeroing(state: Any, optimizer: Any) -> None:
    """An optimizer's ``zero_grad()`` is about to run with backward() calls since its last step
    (never in the usual orders): whether they left its gradients as that step found them."""
    record = _record(state, optimizer)
    if record.stepped == state.rule_state.get(_BACKWARDS, 0):
        return
    param = record.probe
    if param is None:
        record.untouched = False
        return
    grad = param.grad
    version = record.probe_grad.get(grad) if grad is not None else None
    record.untouched = version is not None and grad._version == version


def _remember_probe(record: _Record, optimizer: Any) -> None:
    """At a step: its first parameter with a gradient, and that gradient (weakly) and version."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            grad = param.grad
            if grad is not None:
                record.probe = param
                record.probe_grad.clear()
                record.probe_grad.set(grad, grad._version)
                return
    record.probe = None


def zeroed(state: Any, optimizer: Any) -> None:
    """An optimizer's ``zero_grad()`` returned (``Subscriber.zeroed``): when, where, and what
    it left in each ``.grad`` (``None``, or a zeroed tensor and its version). Only the when in
    the usual orders (no backward since the optimizer's last step): the rest is read only
    when a backward came between."""
    backwards = state.rule_state[_ANY_ZEROED] = state.rule_state.get(_BACKWARDS, 0)
    record = _record(state, optimizer)
    if record.stepped == backwards:
        return
    user = frames.user_frame(sys._getframe(1))
    at = frames.site(user)
    left = _grads_now(optimizer)
    _remember_zero_call(state, user)
    record.zeroed = (backwards, at, left)
    _follow_zeros(state, left)


def module_zeroed(state: Any, module: Any, caller: FrameType) -> None:
    """A module's ``zero_grad()`` returned (:mod:`tensor_dap.agent.module_zero_grad`): as
    :func:`zeroed`, per parameter of the module (an optimizer stepping them is known later);
    only the when if every optimizer stepped since the last backward (none has gradients
    left to apply)."""
    backwards = state.rule_state[_ANY_ZEROED] = state.rule_state.get(_BACKWARDS, 0)
    stepped = _steps_taken(state)
    if stepped and min(stepped) == backwards:
        return
    user = frames.user_frame(caller)
    at = frames.site(user)
    params = list(module.parameters())
    left = dict(zip(map(id, params), _grads_of(params)))
    _remember_zero_call(state, user)
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
    record = _record(state, optimizer)
    previous = record.stepped
    record.stepped = backwards
    _remember_probe(record, optimizer)
    # (an optimizer's first step is only remembered: a new one's `zero_grad(); step()` to
    # start a scheduler after an earlier stage's backward() calls is no erasing)
    if previous is None and failing:
        previous = -1
    zeroed_at = state.rule_state.get(_ANY_ZEROED)
    # (the line of the backward() the previous step applied; this step's is the last one)
    usual, record.applied = record.applied, state.rule_state.get(_BACKWARD_AT)
    if previous is not None and zeroed_at is not None and previous < zeroed_at < backwards:
        _forget_zeros(optimizer, state)  # (a backward came after the zeros: they are gone)
        accumulated = _accumulation_erased(optimizer, record, caller, state, previous, zeroed_at)
        if accumulated is not None:
            return accumulated
        return _replaced(optimizer, caller, state, usual, zeroed_at)
    if previous is None or not previous < backwards or zeroed_at != backwards:
        if state.rule_state.get(_SCALED):
            _forget_zeros(optimizer, state)
        return None
    params = [p for group in optimizer.param_groups for p in group["params"]]
    erased = _erased_by_optimizer(optimizer, record, backwards, state)
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
    backward = _step.backward_call(step_backward_at(state))
    message = _message(name, zeroer, backward_at, step_at, without, len(params), failing, backward)
    # (at the zero_grad() line, the one to move; paused at the step, where it shows)
    return Report(tensors=params[:4], message=message, operands=False, frame=user, at=at)


def _replaced(
    optimizer: Any, caller: FrameType, state: Any, usual: Any, zeroed_at: int
) -> Optional[Report]:
    """The report when the ``zero_grad()`` after backward() number ``zeroed_at`` erased the
    gradients of the backward the previous step applied and a later backward left others,
    which this step applies (see the module's docstring); None otherwise."""
    lines = {number: at for number, at, _, _ in state.rule_state.get(_BACKWARD_LINES, ())}
    erased_at, applied_at = lines.get(zeroed_at), state.rule_state.get(_BACKWARD_AT)
    if usual is None or erased_at != usual or applied_at in (None, usual):
        return None
    params = [p for group in optimizer.param_groups for p in group["params"]]
    zeroed, zeroer = _zeroer(optimizer, params, state, zeroed_at)
    if not zeroed:
        return None
    user = frames.user_frame(caller)
    calls = state.rule_state.get(_ZERO_CALLS, [])
    # (a helper the loop calls zeroes and backpropagates: an attack, a saliency map; a loop
    # doing it itself may put the gradients it saved back before the step, which is not seen)
    if not calls or user is None or calls[0][0] is user.f_code:
        return None
    code, line = next(((c, n) for c, n in calls if c is user.f_code), calls[0])
    inner_code, inner_line = calls[0]
    name = naming.object_name(user, optimizer) or "optimizer"
    zeroer_name = (naming.object_name(user, zeroer) or "model") if zeroer is not None else name
    zero = (
        ""
        if code is inner_code
        else f" (its {zeroer_name}.zero_grad() at {os.path.basename(inner_code.co_filename)}"
        f":{inner_line})"
    )
    what = "this line" if zero else "it"
    message = _replaced_message(name, zero, what, erased_at, applied_at, frames.site(user))
    return Report(
        tensors=params[:4], message=message, operands=False, frame=user, at=(code.co_filename, line)
    )


def _zeroer(optimizer: Any, params: list[Any], state: Any, zeroed_at: int) -> tuple[bool, Any]:
    """Whether the ``zero_grad()`` after backward() number ``zeroed_at`` zeroed ``optimizer``'s
    gradients, and the module whose own it was (None: the optimizer's)."""
    own = _record(state, optimizer).zeroed
    if own is not None and own[0] == zeroed_at:
        return True, None
    ids = {id(p) for p in params}
    modules = _table(state, _MODULE_ZEROED).items()
    zeroer = next((m for m, (n, _, g) in modules if n == zeroed_at and not ids.isdisjoint(g)), None)
    return zeroer is not None, zeroer


def _accumulation_erased(
    optimizer: Any, record: _Record, caller: FrameType, state: Any, previous: int, zeroed_at: int
) -> Optional[Report]:
    """Gradient accumulation with its ``zero_grad()`` inside the micro-batch loop: the
    backward() calls since the optimizer's previous step all ran from one line (called from one
    line), a ``zero_grad()`` of its gradients ran between them, and this step applies the last
    micro-batch's gradients alone. The report, at that ``zero_grad()``; None otherwise."""
    untouched, record.untouched = record.untouched, False
    if untouched:
        return None  # (the backward() calls before its zero_grad() were other optimizers')
    backwards = state.rule_state.get(_BACKWARDS, 0)
    count = backwards - previous
    # (this thread's: threads training models of their own interleave their backward() calls)
    me = threading.get_ident()
    recent = {
        n: (at, outer)
        for n, at, outer, thread in state.rule_state.get(_BACKWARD_LINES, ())
        if thread == me
    }
    numbers = range(max(previous + 1, backwards - _KEPT_BACKWARDS + 1), backwards + 1)
    sites = {recent.get(n) for n in numbers}
    if count < 2 or len(sites) != 1 or None in sites:
        return None
    params = [p for group in optimizer.param_groups for p in group["params"]]
    zeroed, zeroer = _zeroer(optimizer, params, state, zeroed_at)
    calls = state.rule_state.get(_ZERO_CALLS, [])
    user = frames.user_frame(caller)
    if not zeroed or user is None:
        return None
    # (the zero_grad() in the loop calling step(), or a helper it calls: not inside the step, as
    # LBFGS's closure zeroes and backpropagates several times)
    code, line = next(((c, n) for c, n in calls if c is user.f_code), (None, user.f_lineno))
    if code is None or line == user.f_lineno:
        return None
    name = naming.object_name(user, optimizer) or "optimizer"
    zeroer_name = (naming.object_name(user, zeroer) or "model") if zeroer is not None else name
    (site,) = sites
    backward_at = site[0] if site is not None else None
    erased = zeroed_at - previous
    step_at = frames.site(user)
    kept = count - erased
    applied = "one micro-batch's gradients" if kept == 1 else f"{kept} micro-batches' gradients"

    def build(_described: list[Any], expression: str) -> str:
        return (
            f"`{expression}` runs between the {count} backward() calls{_where(backward_at)} "
            f"whose gradients {name}.step(){_where(step_at)} accumulates: it erases the "
            f"gradients of the {erased} before it, so the step applies {applied}, not "
            f"{count}. Call {zeroer_name}.zero_grad() right after {name}.step(), under the same "
            "condition."
        )

    return Report(
        tensors=params[:4], message=build, operands=False, frame=user, at=(code.co_filename, line)
    )


def _replaced_message(
    name: str,
    zero: str,
    what: str,
    erased_at: Any,
    applied_at: Any,
    step_at: Optional[tuple[str, int]],
) -> Any:
    def build(_described: list[Any], expression: str) -> str:
        return (
            f"`{expression}`{zero} runs after backward(){_where(erased_at)} and before "
            f"{name}.step(){_where(step_at)}: the zero_grad() erases the gradients that "
            f"backward() computed, and the backward(){_where(applied_at)} fills them with its "
            f"own, which this step applies instead. Move {what} before "
            f"backward(){_where(erased_at)} or after {name}.step()."
        )

    return build


def _forget_zeros(optimizer: Any, state: Any) -> None:
    """The step used its gradients: their scaling since the zero_grad is no longer followed."""
    followed = state.rule_state.get(_SCALED)
    if followed:
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    followed.pop(id(param.grad), None)


def _erased_by_optimizer(
    optimizer: Any, record: _Record, backwards: int, state: Any
) -> Optional[tuple[Any, None]]:
    """(the line of the optimizer's ``zero_grad()``, None) when it ran after the last backward
    and the gradients are still what it left."""
    zeroed_at = record.zeroed
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


def _records(state: Any) -> TensorMap[_Record]:
    records: Optional[TensorMap[_Record]] = state.rule_state.get(_RECORDS)
    if records is None:
        records = state.rule_state[_RECORDS] = TensorMap()
    return records


def _steps_taken(state: Any) -> list[int]:
    """The backward() count at each known optimizer's last step (those that stepped)."""
    return [r.stepped for _, r in _records(state).items() if r.stepped is not None]


def _record(state: Any, optimizer: Any) -> _Record:
    """The optimizer's :class:`_Record` (made empty on first use; three lookups a step: a
    :class:`TensorMap`'s, whose entry is read and changed in place, not written again)."""
    records = _records(state)
    record: Optional[_Record] = records.get(optimizer)
    if record is None:
        record = _Record()
        records.set(optimizer, record)
    return record


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
    backward: str = "loss.backward()",
) -> Any:
    """Worded at the ``zero_grad()`` line (``expression``); ``backward``: how the program's
    ``backward()`` call reads (:func:`_step.backward_call`)."""

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
            + f". {move} before {backward} (or after {name}.step())."
        )

    return build
