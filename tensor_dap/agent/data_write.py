"""The write checks of armed data breakpoints (:mod:`tensor_dap.agent.data_watch`).

Planned by the engine like a rule (``Watch.set_hook``) while a breakpoint is armed, and only
for the functions that write their first tensor: in-place ops (``add_``, ``copy_``,
``__setitem__``, ``t += 1``: see :mod:`tensor_dap.agent.op_kinds`) and ``t.data = x``. Every
other op leaves the plan without a call, so a breakpoint on a tensor the loop does not write
costs a storage-address lookup per in-place op. Before such an op into the storage of an armed
tensor (the tensor itself, a view of it, its ``.data`` alias) the tensor's value is copied;
after it, the two are compared, the condition (``value`` bound to the tensor) evaluated, and
the program paused at the user's line. Optimizer steps run outside the watch: the parameters
an armed ``step()`` will update are copied before it and compared after it
(:mod:`tensor_dap.agent.optimizers`' subscribers), and the stop is at the user's ``step()``.
"""

from __future__ import annotations

import threading
from types import FrameType, SimpleNamespace
from typing import Any, Optional

import torch

from tensor_dap.agent import data_index, frames, optimizers
from tensor_dap.agent.data_index import Armed
from tensor_dap.agent.data_stop import DataBreakpointHit, suspend_on_write
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.storage import storage_key
from tensor_dap.tensor_text import shape_text

RULE = SimpleNamespace(id=data_index.HOOK_ID, needs_accelerator=False)
SCREEN = None

_DATA_SET = "data.__set__"
_WRITERS = {"__setitem__": "indexed assignment", _DATA_SET: ".data assignment"}


class _Pending(threading.local):
    #: (the tensor an op is writing, [(armed breakpoint, its value before the op)])
    value: Any = None


_pending = _Pending()
#: id(optimizer) -> (the user's frame of its step(), the armed parameters and their old values)
_steps: dict[int, tuple[Optional[FrameType], list[tuple[Armed, Any]]]] = {}
_subscriber: Optional[optimizers.Subscriber] = None


def applies(op: OpInfo) -> bool:
    return op.inplace and not op.passthrough


def applies_passthrough(op: OpInfo) -> bool:
    return op.name == _DATA_SET


def before(op: OpInfo, args: Any, kwargs: Any, caller: Any, watch: Any) -> None:
    """Copy the armed tensors this op is about to write (the mode is off the stack here)."""
    if args:  # (every in-place op pays this: data_index.written_by, inlined)
        try:
            key: Any = args[0].untyped_storage().data_ptr() or storage_key(args[0])
        except Exception:
            key = storage_key(args[0])
        armed = data_index.by_storage.get(key) if key is not None else None
        if armed:
            _pending.value = (args[0], [(a, _snapshot(a)) for a in armed])
    return None


def after(op: OpInfo, args: Any, kwargs: Any, out: Any, caller: Any, watch: Any) -> None:
    pending = _pending.value
    if pending is None or not args or pending[0] is not args[0]:
        return None
    _pending.value = None
    if op.name == _DATA_SET:
        data_index.rekey()
    writer = _WRITERS.get(op.name, f"in-place {op.name}")
    for armed, old in pending[1]:
        check(armed, old, writer, frames.user_frame(caller))
    return None


def _snapshot(armed: Armed) -> Any:
    tensor = armed.ref()
    if tensor is None:
        return None
    with torch.no_grad():
        return tensor.detach().clone()


def check(armed: Armed, old: Any, writer: str, frame: Optional[FrameType]) -> None:
    """Pause at ``frame`` if the armed tensor's value changed from ``old`` (and the condition
    holds)."""
    tensor = armed.ref()
    if tensor is None or old is None or frame is None:
        return
    change = change_text(old, tensor)
    if change is None:
        return
    text = f"{armed.label} written by {writer}: {change}"
    if armed.condition is not None:
        holds, failure = _condition_holds(armed, tensor, frame)
        if not holds:
            return
        text += f" ({failure})" if failure else f" (condition `{armed.condition_text}` holds)"
    suspend_on_write(DataBreakpointHit(armed.data_id, armed.label, text), frame)


def change_text(old: Any, new: Any) -> Optional[str]:
    """What changed from ``old`` to ``new``; ``None`` when nothing did."""
    try:
        with torch.no_grad():
            if old.shape != new.shape:
                return f"shape {shape_text(old.shape)} became {shape_text(new.shape)}"
            o, n = old.detach(), new.detach()
            if o.device != n.device:
                o = o.to(n.device)
            if not (n.is_floating_point() or n.is_complex()):
                o, n = o.double(), n.double()
            differ = (o != n) & ~(torch.isnan(o) & torch.isnan(n))
            count = int(differ.sum())
            if count == 0:
                return None
            parts = [f"{count} of {n.numel()} elements changed"]
            finite = differ & torch.isfinite(o) & torch.isfinite(n)
            if bool(finite.any()):
                biggest = float((n - o).abs()[finite].max())
                parts.append(f"max |change| {biggest:.4g}")
            became = int((torch.isfinite(o) & ~torch.isfinite(n)).sum())
            if became:
                parts.append(f"{became} became non-finite (NaN/inf)")
            return ", ".join(parts)
    except Exception as error:  # sparse, nested...: still a write
        return f"its data changed ({type(error).__name__} comparing the values)"


def _condition_holds(armed: Armed, tensor: Any, frame: FrameType) -> tuple[bool, str]:
    """Whether the breakpoint's condition holds for ``value`` = the tensor, in the user's
    frame; one that raises stops, saying so."""
    names = frames.read_locals(frame)
    names["value"] = tensor
    names.setdefault("torch", torch)
    try:
        return bool(eval(armed.condition, frame.f_globals, names)), ""  # type: ignore[arg-type]
    except Exception as error:
        return True, f"condition `{armed.condition_text}` failed: {type(error).__name__}: {error}"


# -- optimizer steps --------------------------------------------------------------------------
def follow_steps(on: bool) -> None:
    """Watch optimizer steps for armed parameters (while any breakpoint is armed)."""
    global _subscriber
    if on and _subscriber is None:
        _subscriber = optimizers.subscribe(
            optimizers.Subscriber(before_step=_before_step, after_step=_after_step)
        )
    elif not on and _subscriber is not None:
        _subscriber.remove()
        _subscriber = None
        _steps.clear()


def _before_step(optimizer: Any, caller: FrameType) -> None:
    params = [p for group in optimizer.param_groups for p in group["params"]]
    armed = data_index.armed_in(params)
    if armed:
        _steps[id(optimizer)] = (frames.user_frame(caller), [(a, _snapshot(a)) for a in armed])


def _after_step(optimizer: Any) -> None:
    step = _steps.pop(id(optimizer), None)
    if step is None:
        return
    frame, snapshots = step
    writer = f"{type(optimizer).__name__}.step()"
    for armed, old in snapshots:
        check(armed, old, writer, frame)
