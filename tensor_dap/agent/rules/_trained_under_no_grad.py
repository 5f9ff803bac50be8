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

A reentrant ``torch.utils.checkpoint.checkpoint(fn, x, use_reentrant=True)`` runs ``fn`` under
``no_grad`` and replays it with gradients on in backward — unless none of its inputs requires
grad (the first segment, fed the batch): then its output has no history, backward never comes
back to it, and ``fn``'s parameters silently get no gradient (PyTorch only warns). That is
reported whatever the other parameters got: at a step, the parameters without gradient used
since the previous step under such a checkpoint and never with gradients on, at the line
calling ``checkpoint``.

Uses under ``no_grad`` are seen by grad-lost's sampled ``observe`` (the first 8 runs of each
call site, then one in 64), as its uses with gradients on are.
"""

from __future__ import annotations

import ast
import os
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
#: rule_state keys: parameter -> (when, the user's line, the no_grad block's line, the line
#: calling a reentrant checkpoint that ran it) of its last use under no_grad; the time of the
#: last backward(); optimizer -> the time of its last step
_USES = "grad-lost.no-grad-uses"
_BACKWARD_AT = "grad-lost.backward-clock"
_STEPPED = "grad-lost.no-grad-stepped"

_Site = Optional[tuple[str, int]]
_Use = tuple[int, _Site, _Site, _Site]
#: torch's reentrant checkpoint: its autograd Function's forward runs the segment under no_grad
_CHECKPOINT_FILE = os.path.join("torch", "utils", "checkpoint.py")
#: frames looked up from an op for a reentrant checkpoint's forward
_CHECKPOINT_DEPTH = 12
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
    uses: Optional[TensorMap[_Use]] = None
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
            use = (next(CLOCK), frames.site(user), no_grad_site(user), _checkpoint_call(caller))
            uses = state.rule_state.get(_USES)
            if uses is None:
                uses = state.rule_state[_USES] = TensorMap()
        assert uses is not None
        uses.set(item, use)


#: rule_state key: the last backward() ran from leaves only (a loss re-made with
#: ``torch.tensor(..., requires_grad=True)``): it reaches no parameter for a reason of its own
_FROM_LEAVES = "grad-lost.backward-from-leaves"


def _checkpoint_call(frame: Optional[FrameType]) -> _Site:
    """The user's line calling the reentrant checkpoint whose no_grad forward runs ``frame``,
    if one does."""
    depth = _CHECKPOINT_DEPTH
    while frame is not None and depth > 0:
        code = frame.f_code
        if code.co_name == "forward" and code.co_filename.endswith(_CHECKPOINT_FILE):
            return frames.site(frames.user_frame(frame.f_back))
        frame = frame.f_back
        depth -= 1
    return None


def last_backward(state: Any) -> int:
    """When (in :data:`CLOCK`'s order) the last ``backward()`` ran; -1 before any."""
    return int(state.rule_state.get(_BACKWARD_AT, -1))


def from_leaves(state: Any) -> bool:
    """Whether the last ``backward()`` started from leaf tensors only: it reached no graph (a
    loss re-made of numbers, reported at that backward)."""
    return bool(state.rule_state.get(_FROM_LEAVES))


def on_backward(state: Any, from_leaves: bool = False) -> None:
    state.rule_state[_BACKWARD_AT] = next(CLOCK)
    state.rule_state[_FROM_LEAVES] = from_leaves


def check(optimizer: Any, caller: FrameType, state: Any, used_with_grad: Any) -> Optional[Report]:
    """Before ``optimizer.step()``: the report when the step applies nothing because its
    parameters were used only under ``no_grad`` (``used_with_grad``: grad-lost's table of
    uses with gradients on, parameter -> (when, ...))."""
    stepped = state.rule_state.get(_STEPPED)
    if stepped is None:
        stepped = state.rule_state[_STEPPED] = TensorMap()
    # (when it last stepped, in a list changed in place: a step writes no entry)
    held = stepped.get(optimizer)
    if held is None:
        held = [-1]
        stepped.set(optimizer, held)
    previous, held[0] = held[0], next(CLOCK)
    uses = state.rule_state.get(_USES)
    if not uses or state.rule_state.get(_BACKWARD_AT, -1) <= previous:
        return None  # (no backward() since this optimizer's last step)
    if from_leaves(state):  # (no graph at all: not for want of gradients on)
        return None
    params = [p for group in optimizer.param_groups for p in group["params"]]
    checkpointed = _checkpointed_without_grad(params, uses, previous, used_with_grad)
    if checkpointed:
        return _checkpoint_report(optimizer, caller, checkpointed, len(params))
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
    _, line, site, _checkpoint = found[0][1]
    # (at the no_grad block, the line to change; paused at the step, where it shows)
    return Report(
        tensors=[p for p, _ in found[:4]],
        message=_message(name, len(params), len(found), line, site, _place(frames.site(user))),
        operands=False,
        frame=user,
        at=site,
    )


def _checkpointed_without_grad(
    params: list[Any], uses: Any, previous: int, used_with_grad: Any
) -> list[tuple[Any, _Use]]:
    """The parameters without gradient whose uses since the previous step ran under a
    reentrant checkpoint no backward came back to (none with gradients on that built a graph:
    a snapshot ``w0 = layer.weight.detach().clone()`` taken before training builds none)."""
    found = []
    for param in params:
        use = uses.get(param) if param.grad is None else None
        if use is None or use[0] <= previous or use[3] is None:
            continue
        with_grad = used_with_grad.get(param) if used_with_grad else None
        if with_grad is None or with_grad[0] <= previous or not with_grad[2]:
            found.append((param, use))
    return found


def _checkpoint_report(
    optimizer: Any, caller: FrameType, found: list[tuple[Any, _Use]], total: int
) -> Report:
    user = frames.user_frame(caller)
    name = naming.object_name(user, optimizer) or "optimizer"
    step = _place(frames.site(user))
    count = len(found)

    def build(described: list[Any], expression: str) -> str:
        listed = ", ".join(d.name for d in described)
        if count > len(described):
            listed += f" and {count - len(described)} more"
        return (
            f"`{expression}`: none of this reentrant checkpoint's inputs requires grad, so it "
            f"ran its function under no_grad and backward() never comes back to it: {count} "
            f"of {name}'s {total} parameters ({listed}) get no gradient, and {name}.step() at "
            f"{step} leaves them as they are. Pass use_reentrant=False, or make the input "
            f"require grad (`{_first_input(expression)}.requires_grad_()`) before the first "
            "checkpoint."
        )

    return Report(
        tensors=[p for p, _ in found[:4]],
        message=build,
        operands=False,
        frame=user,
        at=found[0][1][3],
    )


def _first_input(expression: str) -> str:
    """``h`` of ``h = checkpoint(layer, h, use_reentrant=True)``; ``x`` when not found."""
    statement = naming.parsed_statement(expression)
    for node in ast.walk(statement) if statement is not None else ():
        if isinstance(node, ast.Call) and len(node.args) > 1:
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else None
            callee = node.func.id if isinstance(node.func, ast.Name) else callee
            if callee == "checkpoint":
                return ast.unparse(node.args[1])
    return "x"


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
