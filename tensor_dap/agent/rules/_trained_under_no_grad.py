"""A step whose parameters took part in the forward only under ``torch.no_grad()`` (part of
``grad-lost``).

``with torch.no_grad(): fake = netG(noise)`` reused for the generator's own step: ``backward()``
runs (through the discriminator), but through no op of the generator's, so none of its
parameters gets a gradient and ``optimizerG.step()`` silently applies nothing, every step.
Parameters used under ``no_grad`` are not reported by grad-lost's other checks: a frozen
backbone under ``no_grad`` beside a trained head (linear probing), a teacher, a target network
are meant. So this check asks for what none of those do: at a step, a ``backward()`` ran since
the optimizer's previous step, *none* of the optimizer's parameters has a gradient, some were
used under ``no_grad`` since that step, and none with gradients on.

Uses under ``no_grad`` are seen by grad-lost's sampled ``observe`` (the first 8 runs of each
call site, then one in 64), as its uses with gradients on are.
"""

from __future__ import annotations

import os
import weakref
from types import FrameType
from typing import Any, Optional

import torch

from tensor_dap.agent import frames, naming
from tensor_dap.agent.lineage import argument_items
from tensor_dap.agent.no_grad_source import no_grad_site
from tensor_dap.agent.provenance import CLOCK
from tensor_dap.agent.rules import Report
from tensor_dap.agent.tensor_map import TensorMap

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
#: rule_state keys: parameter -> (when, the user's line, the no_grad block's line) of its last
#: use under no_grad; the time of the last backward(); optimizer -> the time of its last step
_USES = "grad-lost.no-grad-uses"
_BACKWARD_AT = "grad-lost.backward-clock"
_STEPPED = "grad-lost.no-grad-stepped"

_Site = Optional[tuple[str, int]]
#: where torch's ops under no_grad are no forward: initialisation, a module's conversions
#: (``model.to()``, ``load_state_dict``), gradient clipping, the optimizers' updates
_HOUSEKEEPING_FILES = tuple(
    os.path.join("torch", "nn", *parts)
    for parts in (("init.py",), ("modules", "module.py"), ("utils", "clip_grad.py"))
)
_OPTIMIZERS = os.path.join("", "torch", "optim", "")


def _housekeeping(path: str) -> bool:
    return path.endswith(_HOUSEKEEPING_FILES) or _OPTIMIZERS in path


def observe(args: Any, caller: Any, state: Any) -> None:
    """An op run under ``no_grad``: the parameters among its arguments, when and where; not
    torch's own housekeeping (``nn.init`` at construction, ``model.to()``, an optimizer's
    step), which no forward is."""
    uses: Optional[TensorMap[tuple[int, _Site, _Site]]] = None
    use = None
    for item in argument_items(args):
        # (Parameter's isinstance is a Python call: only tensors that could be one get there)
        if not isinstance(item, _Tensor) or not item.requires_grad:
            continue
        if not isinstance(item, _Parameter):
            continue
        if use is None:
            if caller is not None and _housekeeping(caller.f_code.co_filename):
                return
            user = frames.user_frame(caller)
            use = (next(CLOCK), frames.site(user), no_grad_site(user))
            uses = state.rule_state.get(_USES)
            if uses is None:
                uses = state.rule_state[_USES] = TensorMap()
        assert uses is not None
        uses.set(item, use)


#: rule_state key: the last backward() ran from leaves only (a loss re-made with
#: ``torch.tensor(..., requires_grad=True)``): it reaches no parameter for a reason of its own
_FROM_LEAVES = "grad-lost.backward-from-leaves"


def last_backward(state: Any) -> int:
    """When (in :data:`CLOCK`'s order) the last ``backward()`` ran; -1 before any."""
    return int(state.rule_state.get(_BACKWARD_AT, -1))


def on_backward(state: Any, from_leaves: bool = False) -> None:
    state.rule_state[_BACKWARD_AT] = next(CLOCK)
    state.rule_state[_FROM_LEAVES] = from_leaves


def check(optimizer: Any, caller: FrameType, state: Any, used_with_grad: Any) -> Optional[Report]:
    """Before ``optimizer.step()``: the report when the step applies nothing because its
    parameters were used only under ``no_grad`` (``used_with_grad``: grad-lost's table of
    uses with gradients on, parameter -> (when, ...))."""
    stepped = state.rule_state.get(_STEPPED)
    if stepped is None:
        stepped = state.rule_state[_STEPPED] = weakref.WeakKeyDictionary()
    previous = stepped.get(optimizer, -1)
    stepped[optimizer] = next(CLOCK)
    uses = state.rule_state.get(_USES)
    if not uses or state.rule_state.get(_BACKWARD_AT, -1) <= previous:
        return None  # (no backward() since this optimizer's last step)
    if state.rule_state.get(_FROM_LEAVES):  # (no graph at all: not for want of gradients on)
        return None
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not params or any(p.grad is not None for p in params):
        return None
    found = [(p, use) for p in params if (use := uses.get(p)) is not None and use[0] > previous]
    if not found:
        return None
    if used_with_grad and any(
        (use := used_with_grad.get(p)) is not None and use[0] > previous for p in params
    ):
        return None
    user = frames.user_frame(caller)
    name = naming.object_name(user, optimizer) or "optimizer"
    _, line, site = found[0][1]
    # (at the no_grad block, the line to change; paused at the step, where it shows)
    return Report(
        tensors=[p for p, _ in found[:4]],
        message=_message(name, len(params), len(found), line, site, _place(frames.site(user))),
        operands=False,
        frame=user,
        at=site,
    )


def _message(name: str, total: int, used: int, line: _Site, site: _Site, step: str) -> Any:
    """Worded at the no_grad block (``expression``) when it is known, else at the step."""

    def build(described: list[Any], expression: str) -> str:
        listed = ", ".join(d.name for d in described)
        if used > len(described):
            listed += f" and {used - len(described)} more"
        where = f" at {_place(line)}" if line else ""
        block = "this block" if site else ""
        return (
            f"`{expression}`: {name}.step() at {step} applies no gradient: none of its "
            f"{total} parameters has one. They took part in this step's forward only under "
            f"{block or 'torch.no_grad()'} ({listed} used{where}): backward() ran, but through no "
            f"op of theirs. Compute the forward this step trains with gradients on (to keep "
            f"another step from training them, detach the output there instead: "
            f"fake.detach())."
        )

    return build


def _place(at: _Site) -> str:
    return naming.place(*at) if at is not None else "its line"
