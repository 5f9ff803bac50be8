"""``missing-zero-grad``: ``optimizer.step()`` applies gradients that still hold
contributions from before the previous ``step()``.

PyTorch accumulates into ``.grad``; forgetting ``zero_grad()`` trains on a running sum of every
past batch, with no error. After each step the rule remembers each gradient tensor the step used
and its version (read at the next backward(), unless a zero_grad() comes first); at the next
step, the same gradient tensor modified since (backward added to it) and never zeroed in between
means zero_grad was forgotten. ``zero_grad()`` (which sets
``.grad`` to None, or zeroes it in place) resets that, so intentional accumulation — several
backward calls, one step, then zero_grad — is not reported.

Only writes that really reset a gradient count as zeroing: ``zero_()``, ``fill_(0)``,
``mul_(0)`` and their ``_foreach`` forms, on ``.grad`` or on its ``.data``. Gradient clipping
(``clip_grad_norm_`` scales every gradient in place with ``mul_``), loss-scale unscaling and
hand-written ``grad.mul_(0.5)`` modify gradients without resetting them.
"""

from __future__ import annotations

import ast
import os
import re
import threading
import weakref
from types import FrameType
from typing import Any, NamedTuple, Optional

import torch

from tensor_dap import catalog
from tensor_dap.agent import frames, naming, optimizers
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.optimizers import Subscriber
from tensor_dap.agent.rules import Report, _step, _zeroed_before_step
from tensor_dap.agent.rules.hooks import Args, Kwargs, RuleState
from tensor_dap.agent.storage import storage_key
from tensor_dap.agent.tensor_map import TensorMap

RULE = catalog.rule("missing-zero-grad")

_ZEROED = "missing-zero-grad.zeroed"
#: rule_state key: id(optimizer) -> its :class:`_Steps`
_AFTER_STEP = "missing-zero-grad.after-step"
#: rule_state key: thread -> ``id()`` of the optimizers it stepped whose gradients' versions
#: after that step are still to be read, at its next backward() (per thread: reading the
#: ``.grad`` of another thread's optimizer while that thread's backward, which runs without the
#: GIL, writes it made PyTorch's storage objects race)
_UNREAD = "missing-zero-grad.unread"
#: ops that always reset their target, and those that do with a factor or value of 0
_ZEROING = frozenset(["zero_", "_foreach_zero_"])
_ZEROING_WITH_ZERO = frozenset(["fill_", "mul_", "_foreach_mul_"])


def applies(op: OpInfo) -> bool:
    return op.name in _ZEROING or op.name in _ZEROING_WITH_ZERO


def applies_before(op: OpInfo) -> bool:
    """Zeroing ops, and ``backward()``: the gradients' versions a step left are read there."""
    return op.backward or applies(op)


def before(op: OpInfo, args: Args, kwargs: Kwargs, caller: Any, state: Any) -> Any:
    """Note gradients being zeroed (``zero_grad(set_to_none=False)`` or by hand); at a
    ``backward()``, read the versions the optimizers' last steps left (:func:`_remember`)."""
    if op.backward:
        unread = state.rule_state.get(_UNREAD)
        mine = unread.get(threading.get_ident()) if unread else None
        if mine:
            _read_versions(mine, state)
        return None
    if not args or not _resets(op.name, args, kwargs):
        return None
    zeroed = state.rule_state.setdefault(_ZEROED, set())
    target = args[0]
    for tensor in target if isinstance(target, (list, tuple)) else (target,):
        zeroed.add(id(tensor))
        key = storage_key(tensor)  # ``p.grad.data.zero_()``: another object, the same data
        if key is not None:
            zeroed.add(key)
    return None


def _resets(name: str, args: Args, kwargs: Kwargs) -> bool:
    """Whether the op sets its target to zero: a Python 0 as the fill value or factor (a
    tensor factor, as gradient clipping's, is a scale: it is never read, that would sync)."""
    if name in _ZEROING:
        return True
    value = args[1] if len(args) > 1 else (kwargs or {}).get("value", (kwargs or {}).get("other"))
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0


def install(state: RuleState) -> list[Any]:
    #: the frame calling the step running now (one at a time: a step that raised leaves it
    #: here until the next step, which replaces it)
    callers: dict[int, FrameType] = {}

    def check(optimizer: Any, caller: FrameType) -> Optional[Report]:
        callers.clear()
        callers[id(optimizer)] = caller
        stale = _stale(optimizer, state)
        if not stale:
            return None
        user = frames.user_frame(caller)
        name = naming.object_name(user, optimizer) or "optimizer"
        placed = _placed_zero_grad(user, optimizer, name, stale)
        backward = _step.backward_call(_zeroed_before_step.step_backward_at(state))
        message = _message(len(stale), len(_step.params(optimizer)), name, placed, backward)
        return Report(tensors=stale[:4], message=message, operands=False, frame=user)

    # (the watch's tables for good: looked up once here, not at each step)
    known: dict[int, _Steps] = state.rule_state.setdefault(_AFTER_STEP, {})
    unread_by_thread: dict[int, set[int]] = state.rule_state.setdefault(_UNREAD, {})
    zeroed_grads: set[Any] = state.rule_state.setdefault(_ZEROED, set())

    def after_step(optimizer: Any) -> None:
        caller = callers.pop(id(optimizer), None)
        try:
            if caller is not None and optimizers.closure_step():
                report = _closure_accumulated(optimizer, caller, state)
                if report is not None:
                    state._emit(RULE.id, report, _step.STEP, caller)
            _remember(optimizer, state)
        except Exception:
            state._rule_failed(RULE.id)

    def zeroed(optimizer: Any) -> None:
        """``zero_grad()`` ran unwatched (see optimizers): nothing of this optimizer is stale
        until its next step; the gradients it left are zeros (in case another optimizer
        steps them: none are left by the default ``set_to_none``)."""
        try:
            key = id(optimizer)
            steps = known.get(key)
            if steps is not None and steps.optimizer() is optimizer:
                steps.zeroed = True
                for unread in list(unread_by_thread.values()):
                    unread.discard(key)
            for group in optimizer.param_groups:
                for param in group["params"]:
                    grad = param.grad
                    if grad is not None:
                        zeroed_grads.add(id(grad))
        except Exception:
            state._rule_failed(RULE.id)

    before_step = _step.before_step(RULE.id, state, check)
    return [optimizers.subscribe(Subscriber(before_step, after_step, zeroed))]


def _closure_accumulated(optimizer: Any, caller: FrameType, state: Any) -> Optional[Report]:
    """A ``step(closure)`` just ended: the report when its closure's backward() added to the
    gradients the previous step left, no ``zero_grad()`` between (their versions were read at
    the closure's first backward: :func:`_read_versions`). LBFGS calls the closure up to
    ``max_iter`` times per step, so each call adds to the last one's gradients; any optimizer's
    next step adds to this one's."""
    stale = _stale(optimizer, state)
    if not stale:
        return None
    user = frames.user_frame(caller)
    name = naming.object_name(user, optimizer) or "optimizer"
    total = len(_step.params(optimizer))
    times = " (LBFGS calls it up to max_iter times per step)" if _calls_again(optimizer) else ""

    def build(described: list[Any], expression: str) -> str:
        examples = _examples(described, len(stale))
        return (
            f"`{expression}`: {len(stale)} of {total} parameters get gradients that still hold "
            f"contributions from earlier backward() calls ({examples}): the closure's "
            f"backward() adds to them and zero_grad() is not called in it{times}. Call "
            f"{name}.zero_grad() at the start of the closure."
        )

    return Report(tensors=stale[:4], message=build, operands=False, frame=user)


def _examples(described: list[Any], count: int) -> str:
    """The parameters a report shows (four at most), and how many more it counts."""
    shown = ", ".join(f"{d.name} {d.shape_text}" for d in described)
    return f"{shown} and {count - len(described)} more" if count > len(described) else shown


def _calls_again(optimizer: Any) -> bool:
    return isinstance(optimizer, torch.optim.LBFGS)


class _Steps:
    """What the rule knows of one optimizer: its gradients' versions after its last step (kept
    weakly), and whether its ``zero_grad()`` ran since."""

    __slots__ = ("optimizer", "versions", "zeroed")

    def __init__(self, optimizer: weakref.ref[Any]) -> None:
        self.optimizer = optimizer
        self.versions: TensorMap[int] = TensorMap()
        self.zeroed = False


def _remember(optimizer: Any, state: Any) -> None:
    """This step used the gradients it found: their versions now are what the next step
    compares with, read at the next ``backward()`` that comes before a ``zero_grad()`` of the
    optimizer (:func:`_read_versions`). Before one, nothing can add to them unseen, and in the
    usual orders ``zero_grad()`` comes first: a step then costs no walk of its parameters."""
    steps = _steps(optimizer, state, create=True)
    if steps is None:
        return
    steps.zeroed = False
    if steps.versions:
        steps.versions.clear()
    zeroed = state.rule_state.get(_ZEROED)
    if zeroed:  # this optimizer's step used them: zeroing before it no longer counts
        for param in _step.params(optimizer):
            grad = param.grad
            if grad is not None:
                zeroed.discard(id(grad))
                zeroed.discard(storage_key(grad))
    by_thread = state.rule_state[_UNREAD]
    thread = threading.get_ident()
    unread = by_thread.get(thread)
    if unread is None:
        unread = by_thread[thread] = set()
    unread.add(id(optimizer))


def _read_versions(unread: set[int], state: Any) -> None:
    """Each gradient of the optimizers (``id()``s ``unread``) that stepped and were not zeroed
    since, and its version: this step's only (``zero_grad()`` sets gradients to None, so each
    step's are new tensors, and a table kept across steps would grow by the parameter count
    at each one)."""
    known: dict[int, _Steps] = state.rule_state.get(_AFTER_STEP, {})
    for key in list(unread):
        steps = known.get(key)
        optimizer = steps.optimizer() if steps is not None else None
        if steps is None or optimizer is None or steps.zeroed:
            continue
        versions = steps.versions
        for param in _step.params(optimizer):
            grad = param.grad
            if grad is not None:
                versions.set(grad, grad._version)
    unread.clear()


def _steps(optimizer: Any, state: Any, create: bool = False) -> Optional[_Steps]:
    """What is known of ``optimizer`` (None: not stepped yet, unless ``create``; an optimizer
    without weak references: not judged)."""
    known: dict[int, _Steps] = state.rule_state[_AFTER_STEP]
    steps = known.get(id(optimizer))
    if steps is not None and steps.optimizer() is optimizer:
        return steps
    if not create:
        return None
    try:
        steps = _Steps(weakref.ref(optimizer))
    except TypeError:
        return None
    for key in [key for key, held in known.items() if held.optimizer() is None]:
        del known[key]  # optimizers gone (the id may be this one's now)
    known[id(optimizer)] = steps
    return steps


def _stale(optimizer: Any, state: Any) -> list[Any]:
    """The parameters whose gradient was added to since the last step that used it and not
    zeroed in between."""
    steps = _steps(optimizer, state)
    if steps is None or steps.zeroed or not steps.versions:
        return []
    versions = steps.versions
    zeroed = state.rule_state.get(_ZEROED, ())
    stale = []
    for group in optimizer.param_groups:
        for param in group["params"]:
            grad = param.grad
            if grad is None:
                continue
            version = versions.get(grad)
            if version is not None and grad._version != version and not _was_zeroed(grad, zeroed):
                stale.append(param)
    return stale


def _was_zeroed(grad: Any, zeroed: Any) -> bool:
    return id(grad) in zeroed or storage_key(grad) in zeroed


#: where a ``zero_grad()`` is found that does not run before each step: under a condition
#: in the step's loop, or outside that loop; and the ``step()`` itself under a condition in its
#: loop (gradient accumulation), with that ``zero_grad()`` outside the loop or none
_CONDITIONAL, _OUTSIDE, _ACCUMULATING = "conditional", "outside", "accumulating"
#: a model's ``zero_grad()`` in the step's loop that zeroes only some of the optimizer's
#: parameters: the stale ones are not the model's (``log_vars`` of uncertainty weighting, a
#: ``nn.Parameter`` beside the model in the optimizer)
_PARTIAL = "partial"


class _Placement(NamedTuple):
    """What :func:`_placed_zero_grad` found: its kind (one of the three above, or ``""``: a
    loop around the step with nothing to say), where that ``zero_grad()`` is, the optimizer's
    name in its frame, and what the call is written on there (``optimizerD``, or the model
    ``netD`` whose own ``zero_grad()`` zeroes the same gradients)."""

    kind: str
    at: Optional[tuple[str, int]]
    optimizer: str
    zeroer: str


#: the condition of an accumulating step: every so many batches (``(i + 1) % accum == 0``),
#: or as a library says (``accelerator.sync_gradients``); a guard such as ``if
#: math.isfinite(loss.item()):`` skips a bad batch, whose gradients must then be zeroed
_ACCUMULATION = re.compile(r"%|accum|sync_gradients", re.IGNORECASE)
#: user frames looked up from the step's for the loop that runs it (a trainer's
#: ``_optimizer_step()`` helper, called from its epoch's loop)
_STEP_CALLERS = 2


def _placed_zero_grad(
    user: Optional[FrameType], optimizer: Any, name: str, stale: list[Any]
) -> Optional[_Placement]:
    """Read statically, a ``zero_grad()`` of ``optimizer`` (``name`` in the step's frame) that
    runs, but not before each step: under an ``if`` in the loop around the ``step()`` line
    (``if (i + 1) % accum == 0: optimizer.zero_grad()``: gradient accumulation whose ``step()``
    was left out of the condition), else in the same function outside that loop (once before
    it, or once an epoch around an inner loop of batches). The loop is looked for around the
    step, else around the line of a user frame above calling it (``self._optimizer_step()`` in
    the epoch's loop). A step under a condition in its loop (gradient accumulation) with no
    ``zero_grad()`` in the loop is :data:`_ACCUMULATING`. A :class:`_Placement`, None when none
    of these. A model's own ``zero_grad()`` counts as its optimizer's (``netD.zero_grad()``)."""
    frame = user
    for _ in range(_STEP_CALLERS + 1):
        if frame is None:
            return None
        if frames.is_user_code(frame.f_code):
            named = name if frame is user else naming.object_name(frame, optimizer)
            tree = naming.module_tree(frame.f_code.co_filename) if named else None
            zeroers = {named, *_models_of(frame, optimizer)} if named else set()
            found = (
                _placed_in(tree, frame, named, zeroers, stale)
                if tree is not None and named
                else None
            )
            if found is not None:
                return found if found.kind else None
        frame = frame.f_back
    return None


def _models_of(frame: FrameType, optimizer: Any) -> list[str]:
    """The names the frame gives the modules whose parameters the optimizer steps (``netD`` of
    ``optimizerD``: the DCGAN tutorial zeroes the model, ``netD.zero_grad()``)."""
    stepped = {id(p) for p in _step.params(optimizer)}
    try:
        scopes = naming.names_in_sight(frame)  # (with a trainer's self.model)
    except Exception:
        return []
    return [
        name
        for name, value in scopes.items()
        if isinstance(value, torch.nn.Module)
        and any(id(p) in stepped for p in value.parameters(recurse=True))
    ]


def _placed_in(
    tree: ast.AST, frame: FrameType, optimizer: str, zeroers: set[str], stale: list[Any]
) -> Optional[_Placement]:
    """:func:`_placed_zero_grad` in the frame's function (``zeroers``: the names whose
    ``zero_grad()`` zeroes the optimizer's gradients); a placement of kind ``""`` for a loop
    around the line with nothing to say, None for no loop around it."""
    line, path = frame.f_lineno, frame.f_code.co_filename

    def around(node: ast.AST) -> bool:
        first = getattr(node, "lineno", 0)
        return bool(first <= line <= (getattr(node, "end_lineno", None) or first))

    def zero_grads(node: ast.AST) -> list[tuple[int, str]]:
        calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)]
        return [
            (call.lineno, ast.unparse(call.func.value))
            for call in calls
            if isinstance(call.func, ast.Attribute)
            and call.func.attr == "zero_grad"
            and ast.unparse(call.func.value) in zeroers
        ]

    def placement(kind: str, found: Optional[tuple[int, str]]) -> _Placement:
        at = (path, found[0]) if found is not None else None
        return _Placement(kind, at, optimizer, found[1] if found is not None else optimizer)

    loop = naming.innermost_loop(tree, line)
    if loop is None:
        return None
    partial = _zeroing_others(frame, zero_grads(loop), optimizer, stale)
    if partial is not None:
        return placement(_PARTIAL, partial)
    for branch in ast.walk(loop):
        if isinstance(branch, ast.If) and not around(branch) and zero_grads(branch):
            return placement(_CONDITIONAL, zero_grads(branch)[0])
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    scopes = [n for n in ast.walk(tree) if isinstance(n, functions) and around(n)]
    scope = max(scopes, key=lambda node: node.lineno) if scopes else tree
    end = loop.end_lineno or loop.lineno
    outside = [z for z in zero_grads(scope) if not loop.lineno <= z[0] <= end]
    conditional = any(
        isinstance(branch, ast.If)
        and around(branch)
        and _ACCUMULATION.search(ast.unparse(branch.test))
        for branch in ast.walk(loop)
    )
    if conditional and not zero_grads(loop):
        return placement(_ACCUMULATING, outside[0] if outside else None)
    return placement(_OUTSIDE if outside else "", outside[0] if outside else None)


def _zeroing_others(
    frame: FrameType, calls: list[tuple[int, str]], optimizer: str, stale: list[Any]
) -> Optional[tuple[int, str]]:
    """The first of ``calls`` (``(line, name)`` of the ``zero_grad()`` calls in the step's loop)
    that is a module's (not the optimizer's) holding none of the ``stale`` parameters: it runs,
    and zeroes the others."""
    if not stale:
        return None
    try:
        scopes = naming.names_in_sight(frame)
    except Exception:
        return None
    for line, name in calls:
        module = scopes.get(name) if name != optimizer else None
        if isinstance(module, torch.nn.Module):
            held = {id(p) for p in module.parameters()}
            if not any(id(p) in held for p in stale):
                return line, name
    return None


def _message(
    stale: int,
    total: int,
    optimizer: str,
    placed: Optional[_Placement] = None,
    backward: str = "loss.backward()",
) -> Any:
    """``optimizer``: the name the user's code gives the optimizer (``opt``, ``self.opt``);
    ``placed``: its ``zero_grad()`` that does not run before each step, if there is one
    (:func:`_placed_zero_grad`); ``backward``: how the program's ``backward()`` call reads
    (:func:`_step.backward_call`)."""

    def build(described: list[Any], expression: str) -> str:
        examples = _examples(described, stale)
        head = (
            f"`{expression}`: {stale} of {total} parameters get gradients that still hold "
            f"contributions from before the previous step() ({examples}):"
        )
        text = f"{head} zero_grad() was not called since."
        each_step = f"{optimizer}.zero_grad() before {backward} in each step."
        if placed is None:
            return f"{text} Call {each_step}"
        kind, at, named, zeroer = placed
        where = f"{os.path.basename(at[0])}:{at[1]}" if at is not None else ""
        if kind == _PARTIAL:
            return (
                f"{head} {zeroer}.zero_grad() at {where} zeroes {zeroer}'s parameters only, and "
                f"these are not among them. Call {named}.zero_grad() there instead: it zeroes "
                f"every parameter {named} steps."
            )
        if kind == _ACCUMULATING:
            once = f" ({zeroer}.zero_grad() at {where} runs once, before that loop)" if at else ""
            return (
                f"{text} step() runs under a condition in its loop (gradient accumulation)"
                f"{once}: call {named}.zero_grad() right after each step(), under that "
                "condition."
            )
        if kind == _OUTSIDE:
            return (
                f"{text} {zeroer}.zero_grad() at {where} runs outside the loop that calls "
                f"step() (once before it, or once an epoch): move it into that loop, i.e. "
                f"call {each_step}"
            )
        return (
            f"{text} {zeroer}.zero_grad() at {where} runs under a condition, this step() at "
            f"every iteration: to accumulate gradients, call {named}.step() under the same "
            f"condition, just before that zero_grad(); otherwise call {each_step}"
        )

    return build
