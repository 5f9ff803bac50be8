"""``stale-copy``: the program computes with a copy of a tensor an optimizer updates, made
before the update.

``w = w.to(device)`` (or ``.cuda()``, ``.double()``) after ``opt = SGD([w])`` rebinds ``w`` to a
copy: ``opt.step()`` updates the original, the program keeps computing with the copy, which
never changes. Gradients still flow through the copy to the original, so nothing raises and no
gradient is missing: the loss just stays flat (PyTorch's docs: move a model "before
constructing optimizers for it"). ``model.to(device)`` moves a module's parameters in place and
is not this.

How: a copy of a leaf that requires grad (``.to``, ``.cuda``, a dtype cast), made with grad
mode on, gets a hook on its autograd node remembering the leaf's version at the copy. Backward
passes running through that node after the leaf was changed in place twice, each change seen
by a backward through it (step, backward, step, backward), are a copy used across updates: the
next ``step()`` of an optimizer holding the leaf is reported, at the copy's line. A copy made in
each forward (a mixed-precision cast ``self.weight.to(x.dtype)``, CPU offload) is used by the
backward passes of its own step — one step may come between two of them (a second loss's
``backward()`` through a retained graph after the first optimizer stepped) — never reported.
No step pays for this rule until a stale copy was seen: its step hook is subscribed then.
"""

from __future__ import annotations

import ast
import os
import sys
import threading
import weakref
from types import FrameType
from typing import Any, Callable, Optional

import torch

from tensor_dap import catalog
from tensor_dap.agent import frames, naming, optimizers
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.optimizers import Subscriber
from tensor_dap.agent.rules import Report, _step
from tensor_dap.agent.rules.hooks import Args, Kwargs, RuleState
from tensor_dap.agent.tensor_map import TensorMap

RULE = catalog.rule("stale-copy")

#: the ops that copy a tensor to another device or dtype
_COPIES = frozenset(
    ["to", "cuda", "cpu", "xpu", "mps", "float", "double", "half", "bfloat16", "type"]
)
#: rule_state key: this watch's :class:`_StaleCopies`
_STALE = "stale-copy.stale"
#: changes of the original a backward through the copy must have seen (one can come between
#: two backward passes of one step)
_CHANGES_SEEN = 2
#: where a copy was made: (its user line, the op)
_Copy = tuple[Optional[tuple[str, int]], str]

_Tensor = torch.Tensor


def applies(op: OpInfo) -> bool:
    return op.name in _COPIES


def after(op: OpInfo, args: Args, kwargs: Kwargs, out: Any, caller: Any, state: Any) -> Any:
    """A copy of a leaf that requires grad: its node remembers the leaf's version now."""
    if not args:
        return None
    source = args[0]
    if (
        out is source
        or not isinstance(out, _Tensor)
        or not isinstance(source, _Tensor)
        or not source.requires_grad
        or source.grad_fn is not None
    ):
        return None
    node = out.grad_fn
    stale = state.rule_state.get(_STALE)
    if node is None or stale is None:
        return None
    user = frames.user_frame(caller)
    if user is None:
        return None
    node.register_hook(stale.watcher(source, (frames.site(user), op.name), out))
    return None


class _StaleCopies:
    """The copies found used after their original changed, until an optimizer holding the
    original steps (reported then); the step hook is subscribed only while some are pending."""

    def __init__(self, state: RuleState) -> None:
        #: (weakly: the watch holds this in its rule_state, and a stopped watch must go at once)
        self._state = weakref.ref(state)
        #: original -> (the copy's line and op, what the copy is: "cuda:0", "torch.float64")
        self.pending: TensorMap[tuple[_Copy, str]] = TensorMap()
        self.reported: set[tuple[str, int]] = set()
        self.subscriber: Optional[Subscriber] = None
        self._lock = threading.Lock()

    def watcher(self, source: Any, copy_at: _Copy, copy: Any) -> Callable[..., None]:
        """The hook of a copy's node: the original's version is checked at each backward (the
        hook holds the original, as the node's own next node does; the watch weakly)."""
        seen = [source._version, 0]  # (the version the last backward saw, changes seen)
        made = _what(source, copy)
        me = weakref.ref(self)

        def hook(_grad_inputs: Any, _grad_outputs: Any) -> None:
            version = source._version
            if version == seen[0]:
                return
            seen[0], seen[1] = version, seen[1] + 1
            stale = me()
            # (in a step(closure), between two of the closure's calls: the step changed it)
            needed = 1 if optimizers.closure_step() else _CHANGES_SEEN
            if stale is not None and copy_at[0] is not None and seen[1] >= needed:
                stale.found(source, copy_at, made)

        return hook

    def found(self, source: Any, copy_at: _Copy, made: str) -> None:
        """(in a backward, maybe on an autograd device thread)"""
        state = self._state()
        if state is None or copy_at[0] in self.reported or RULE.id not in state.enabled:
            return
        with self._lock:
            self.pending.set(source, (copy_at, made))
            if self.subscriber is None:
                check = _step.before_step(RULE.id, state, self.check)

                def after_step(optimizer: Any) -> None:
                    """A step(closure) (LBFGS) updates the original between the closure's
                    calls: its end checks too, a program running one such step included."""
                    if optimizers.closure_step():
                        check(optimizer, sys._getframe(1))

                self.subscriber = optimizers.subscribe(
                    Subscriber(before_step=check, after_step=after_step)
                )

    def check(self, optimizer: Any, caller: FrameType) -> Optional[Report]:
        """Before a step: the report when it updates the original of a stale copy."""
        for group in optimizer.param_groups:
            for param in group["params"]:
                found = self.pending.get(param)
                if found is None:
                    continue
                (site, op_name), made = found
                with self._lock:
                    self.pending.pop(param)
                    self.reported.add(site)
                    if not len(self.pending):
                        self.remove()
                user = frames.user_frame(caller)
                name = naming.object_name(user, optimizer) or "optimizer"
                message = _message(name, made, op_name, site, frames.site(user))
                return Report(tensors=[param], message=message, operands=False, frame=user, at=site)
        return None

    def remove(self) -> None:
        if self.subscriber is not None:
            self.subscriber.remove()
            self.subscriber = None


def _what(source: Any, copy: Any) -> str:
    """What the copy is: its device when that differs from the original's, else its dtype."""
    if copy.device != source.device:
        return str(copy.device)
    return str(copy.dtype)


def install(state: RuleState) -> list[Any]:
    stale = state.rule_state[_STALE] = _StaleCopies(state)
    return [stale]


def _message(
    optimizer: str,
    made: str,
    op_name: str,
    site: tuple[str, int],
    step_at: Optional[tuple[str, int]],
) -> Any:
    """Worded at the copy's line (``expression``); ``made``: the copy's device or dtype."""
    dtype = made.startswith("torch.")
    copy = f"a {made} copy" if dtype else f"a copy on {made}"
    if dtype:
        keyword = f"dtype={made}"
    else:
        keyword = "device=" + (naming.device_variable(site[0]) or f'"{made}"')

    def build(described: list[Any], expression: str) -> str:
        original = described[0]
        origin = original.origin
        created = f", created at {origin.short()}" if origin is not None else ""
        where = f" at {os.path.basename(origin.path)}:{origin.line}" if origin is not None else ""
        return (
            f"`{expression}` makes {copy} of a tensor that {optimizer} updates (a leaf "
            f"{original.shape_text} {original.dtype} on {original.device} that requires grad"
            f"{created}). The program computes with the copy, but {optimizer}.step()"
            f"{_where(step_at)} updates the original: the copy, made before those updates, does "
            f"not follow them, so what is computed from it trains on stale values. Create the "
            f"tensor with {keyword}{where}, or, before creating {optimizer}, make the copy a "
            f"leaf of its own: `{_as_leaf(expression, op_name)}`."
        )

    return build


def _where(at: Optional[tuple[str, int]]) -> str:
    return f" at {os.path.basename(at[0])}:{at[1]}" if at is not None else ""


class _AsLeaf(ast.NodeTransformer):
    """Each call of the copy's op, ``x.to(device)``, made ``x.to(device).detach()
    .requires_grad_()``."""

    def __init__(self, op_name: str) -> None:
        self.op_name = op_name

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if not (isinstance(node.func, ast.Attribute) and node.func.attr == self.op_name):
            return node
        detached = ast.Call(ast.Attribute(node, "detach", ast.Load()), [], [])
        return ast.Call(ast.Attribute(detached, "requires_grad_", ast.Load()), [], [])


def _as_leaf(expression: str, op_name: str) -> str:
    """The copy's line with each copy made a new leaf (``w = w.to(device).detach()
    .requires_grad_()``, also in a tuple or a list comprehension)."""
    statement = naming.parsed_statement(expression)
    if statement is not None:
        written = ast.unparse(statement)
        made = ast.unparse(_AsLeaf(op_name).visit(statement))
        if made != written:
            return made
    return "copy = original.to(...).detach().requires_grad_()"
