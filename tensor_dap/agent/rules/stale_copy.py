"""``stale-copy``: the program computes with a copy of a tensor an optimizer updates, made
before the update.

``w = w.to(device)`` (or ``.cuda()``, ``.double()``) after ``opt = SGD([w])`` rebinds ``w`` to a
copy: ``opt.step()`` updates the original, the program keeps computing with the copy, which
never changes. Gradients still flow through the copy to the original, so nothing raises and no
gradient is missing: the loss just stays flat (PyTorch's docs: move a model "before
constructing optimizers for it"). ``model.to(device)`` moves a module's parameters in place and
is not this.

How: a copy of a leaf that requires grad (``.to``, ``.cuda``, a dtype cast), made with grad
mode on, gets a hook on its autograd node remembering the leaf's version at the copy. A
backward running through that node after the leaf was changed in place (an optimizer's step) is
a copy made before the update and used after it: the next ``step()`` of an optimizer holding the
leaf is reported, at the copy's line. A copy made in each forward (a mixed-precision cast
``self.weight.to(x.dtype)``, CPU offload) is used by the backward of its own step, before any
update: never reported. No step pays for this rule until a stale copy was seen: its step hook
is subscribed then.
"""

from __future__ import annotations

import ast
import os
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
    node.register_hook(stale.watcher(source, frames.site(user), out))
    return None


class _StaleCopies:
    """The copies found used after their original changed, until an optimizer holding the
    original steps (reported then); the step hook is subscribed only while some are pending."""

    def __init__(self, state: RuleState) -> None:
        self.state = state
        #: original -> (the copy's line, what the copy is: "cuda:0", "torch.float64")
        self.pending: TensorMap[tuple[tuple[str, int], str]] = TensorMap()
        self.reported: set[tuple[str, int]] = set()
        self.subscriber: Optional[Subscriber] = None
        self._lock = threading.Lock()

    def watcher(
        self, source: Any, site: Optional[tuple[str, int]], copy: Any
    ) -> Callable[..., None]:
        """The hook of a copy's node: the original's version is checked at each backward (the
        hook holds the original, as the node's own next node does; the watch weakly)."""
        version = source._version
        made = _what(source, copy)
        me = weakref.ref(self)

        def hook(_grad_inputs: Any, _grad_outputs: Any) -> None:
            stale = me()
            if stale is not None and site is not None and source._version != version:
                stale.found(source, site, made)

        return hook

    def found(self, source: Any, site: tuple[str, int], made: str) -> None:
        """(in a backward, maybe on an autograd device thread)"""
        if site in self.reported or RULE.id not in self.state.enabled:
            return
        with self._lock:
            self.pending.set(source, (site, made))
            if self.subscriber is None:
                check = _step.before_step(RULE.id, self.state, self.check)
                self.subscriber = optimizers.subscribe(Subscriber(before_step=check))

    def check(self, optimizer: Any, caller: FrameType) -> Optional[Report]:
        """Before a step: the report when it updates the original of a stale copy."""
        for group in optimizer.param_groups:
            for param in group["params"]:
                found = self.pending.get(param)
                if found is None:
                    continue
                site, made = found
                with self._lock:
                    self.pending.pop(param)
                    self.reported.add(site)
                    if not len(self.pending):
                        self.remove()
                user = frames.user_frame(caller)
                name = naming.object_name(user, optimizer) or "optimizer"
                message = _message(name, made, frames.site(user))
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


def _message(optimizer: str, made: str, step_at: Optional[tuple[str, int]]) -> Any:
    """Worded at the copy's line (``expression``); ``made``: the copy's device or dtype."""
    keyword = "dtype" if made.startswith("torch.") else "device"

    def build(described: list[Any], expression: str) -> str:
        original = described[0]
        origin = original.origin
        created = f", created at {origin.short()}" if origin is not None else ""
        value = made if keyword == "dtype" else "device"
        where = f" at {os.path.basename(origin.path)}:{origin.line}" if origin is not None else ""
        return (
            f"`{expression}` makes a {made} copy of a tensor that {optimizer} updates (a leaf "
            f"{original.shape_text} {original.dtype} on {original.device} that requires grad"
            f"{created}). The program computes with the copy, but {optimizer}.step()"
            f"{_where(step_at)} updates the original: the copy never changes, and what is "
            f"computed from it does not learn. Create the tensor with {keyword}={value}"
            f"{where}, or, before creating {optimizer}, make the copy a leaf of its own: "
            f"`{_as_leaf(expression)}`."
        )

    return build


def _where(at: Optional[tuple[str, int]]) -> str:
    return f" at {os.path.basename(at[0])}:{at[1]}" if at is not None else ""


def _as_leaf(expression: str) -> str:
    """The copy's line made a new leaf (``w = w.to(device).detach().requires_grad_()``)."""
    statement = naming.parsed_statement(expression)
    if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call):
        targets = " = ".join(ast.unparse(target) for target in statement.targets)
        return f"{targets} = {ast.unparse(statement.value)}.detach().requires_grad_()"
    return "copy = original.to(...).detach().requires_grad_()"
