"""Tensor data breakpoints in the debuggee ("Break on Value Change"): which tensors are offered
and which are armed.

The debug adapter (:mod:`tensor_dap.adapter.data_breakpoints`) resolves a variable of VARIABLES
or an expression of WATCH by evaluating ``offer(<expression>, <label>)`` in the user's frame:
the tensor gets a data id here, held by a weak reference only. ``setDataBreakpoints`` then comes
on the agent channel (:func:`channel_message`): the ids it names are armed, every other one
disarmed, and the engine plans the write checks (:mod:`tensor_dap.agent.data_write`) for
in-place ops only while one is armed. A tensor that dies takes its breakpoint with it; the
adapter is told (``{"dataBreakpointGone": id, "message": ...}``).

Nothing here keeps a tensor alive: the table holds weak references and storage addresses.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import weakref
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch

from tensor_dap.agent import data_index, data_write
from tensor_dap.agent.data_index import HOOK_ID, Armed

if TYPE_CHECKING:
    from tensor_dap.agent.engine import Watch

Send = Callable[[dict[str, Any]], None]

_ids = itertools.count(1)
#: data id -> (weak reference, label) of every tensor offered
_offered: dict[str, tuple[weakref.ref[Any], str]] = {}
_watch: Optional[Watch] = None
_wake: Optional[Callable[[], None]] = None
#: how to tell the adapter (the connection that last set the breakpoints)
_send: Optional[Send] = None
_forks_followed: list[bool] = []


def bind(watch: Watch, wake: Optional[Callable[[], None]] = None) -> None:
    """The watch that checks the writes in this process; ``wake`` starts it on the main
    thread if nothing else had (see :class:`~tensor_dap.agent.late_start.Starter`)."""
    global _watch, _wake
    _watch, _wake = watch, wake
    if hasattr(os, "register_at_fork") and not _forks_followed:
        _forks_followed.append(True)
        # a forked child (a DataLoader worker) has none of the parent's breakpoints: their ids
        # name the parent, and its channel socket is the parent's
        os.register_at_fork(after_in_child=_forget_in_child)


def offer(value: Any, label: str) -> str:
    """Evaluated by the adapter in the user's frame: ``value``'s data id and description, as
    a JSON object the adapter reads (``dataId`` null, with the reason, for a non-tensor)."""
    import json

    if not isinstance(value, torch.Tensor):
        kind = type(value).__name__
        return json.dumps({"dataId": None, "description": f"{label} is a {kind}, not a tensor"})
    with data_index.lock:
        data_id = next((i for i, (ref, _) in _offered.items() if ref() is value), None)
        if data_id is None:
            data_id = f"tensor:{os.getpid()}:{next(_ids)}"
            _offered[data_id] = (weakref.ref(value, _freed_callback(data_id)), label)
    from tensor_dap.render.tensor import value_line

    description = f"{label} {value_line(value)}"
    return json.dumps({"dataId": data_id, "description": description})


def _freed_callback(data_id: str) -> Callable[[Any], None]:
    def freed(_: Any) -> None:
        try:
            with data_index.lock:
                entry = _offered.pop(data_id, None)
            armed = data_index.remove(data_id)
            if armed is not None:
                _plan_checks()
        except Exception:  # the interpreter is shutting down
            return
        if armed is not None and entry is not None:
            _notify(
                {
                    "dataBreakpointGone": data_id,
                    "message": f"{entry[1]} was freed: its data breakpoint is removed",
                }
            )

    return freed


def _notify(message: dict[str, Any]) -> None:
    send = _send
    if send is not None:
        with contextlib.suppress(OSError):
            send(message)


def channel_message(message: dict[str, Any], send: Send) -> None:
    """A message of the adapter other than a rule set (the agent channel's reader calls it)."""
    global _send
    specs = message.get("dataBreakpoints")
    if not isinstance(specs, list):
        return
    _send = send
    send({"reply": message.get("request"), "results": set_breakpoints(specs)})


def set_breakpoints(specs: list[Any]) -> dict[str, dict[str, Any]]:
    """Arm the breakpoints ``specs`` (``{"dataId", "condition"}``) on tensors offered here,
    disarm the others; per data id of this process, whether it is armed (and why not)."""
    results: dict[str, dict[str, Any]] = {}
    armed: dict[str, Armed] = {}
    with data_index.lock:
        for spec in specs:
            data_id = spec.get("dataId") if isinstance(spec, dict) else None
            entry = _offered.get(str(data_id))
            if entry is None:
                continue  # another process's (or a session's before)
            ref, label = entry
            result = _arm(str(data_id), ref, label, str(spec.get("condition") or ""), armed)
            results[str(data_id)] = result
        data_index.replace(armed)
    _plan_checks()
    return results


def _arm(
    data_id: str, ref: weakref.ref[Any], label: str, condition: str, armed: dict[str, Armed]
) -> dict[str, Any]:
    if ref() is None:
        return {"verified": False, "message": f"{label} was freed"}
    if _watch is None:
        return {"verified": False, "message": "tensor-dap does not watch this process"}
    code = None
    if condition.strip():
        try:
            code = compile(condition, "<data breakpoint condition>", "eval")
        except SyntaxError as error:
            return {"verified": False, "message": f"condition: {error.msg}"}
    armed[data_id] = Armed(data_id, label, ref, condition, code)
    return {"verified": True}


def _plan_checks() -> None:
    watch = _watch
    if watch is None:
        return
    on = bool(data_index.armed)
    module: Optional[ModuleType] = data_write if on else None
    data_write.follow_steps(on)
    if (module is None) != (HOOK_ID not in watch.hooks):
        watch.set_hook(HOOK_ID, module)
    if module is not None and _wake is not None and watch._mode is None:
        _wake()


def program_ended() -> None:
    """The program returned: its tensors going now is no news to the user."""
    global _send
    _send = None


def _forget_in_child() -> None:
    """After fork, in the child: no lock taken (another thread of the parent may have held one)."""
    global _send
    data_index.lock = type(data_index.lock)()
    _offered.clear()
    data_index.armed.clear()
    data_index.by_storage.clear()
    _send = None
    if _watch is not None and HOOK_ID in _watch.hooks:
        _watch.set_hook(HOOK_ID, None)


def reset() -> None:
    """Forget everything (tests)."""
    global _send
    with data_index.lock:
        _offered.clear()
    data_index.replace({})
    _send = None
    _plan_checks()
