"""``leaves-device``: user code copies a tensor from an accelerator to the CPU.

Watches ``.cpu()``, ``.to("cpu")`` / ``.to(cpu_tensor)``, ``.numpy()``, ``.tolist()``,
``np.asarray(t)`` and ``cpu_t.copy_(acc_t)`` called directly from user code (torch's own
printing and saving are not the user's doing). Reading one number (``.item()``, ``float(t)``...)
is what people do to log a loss; it is reported only with the option ``{"scalars": true}``.
"""

from __future__ import annotations

from typing import Any

import torch

from tensor_dap import catalog
from tensor_dap.agent import frames
from tensor_dap.agent.op_kinds import HOST_COPIES, SCALAR_READS, OpInfo
from tensor_dap.agent.rules import Report
from tensor_dap.agent.rules._args import created
from tensor_dap.agent.rules.hooks import Args, Kwargs

RULE = catalog.rule("leaves-device")

_Tensor = torch.Tensor
_WATCHED = HOST_COPIES | SCALAR_READS | {"to", "copy_"}


def applies(op: OpInfo) -> bool:
    return op.name in _WATCHED


def _on_accelerator(tensor: Any) -> bool:
    return isinstance(tensor, _Tensor) and tensor.device.type not in ("cpu", "meta")


def _target_is_cpu(args: Args, kwargs: Kwargs) -> bool:
    """Whether ``Tensor.to(...)`` arguments name the CPU as destination."""
    candidates = list(args[1:])
    if kwargs and "device" in kwargs:
        candidates.append(kwargs["device"])
    for arg in candidates:
        if isinstance(arg, _Tensor):
            return arg.device.type == "cpu"
        if isinstance(arg, (str, torch.device)):
            try:
                return torch.device(arg).type == "cpu"
            except (RuntimeError, TypeError):
                return False
    return False


def before(op: OpInfo, args: Args, kwargs: Kwargs, caller: Any, state: Any) -> Any:
    if not args or not frames.is_user_code(caller.f_code):
        return None
    name = op.name
    if name == "copy_":
        into_cpu = len(args) > 1 and isinstance(args[0], _Tensor) and args[0].device.type == "cpu"
        if into_cpu and _on_accelerator(args[1]):
            return Report(tensors=[args[1], args[0]], message=_copy_message)
        return None
    source = args[0]
    if not _on_accelerator(source):
        return None
    if name == "to" and not _target_is_cpu(args, kwargs):
        return None
    if name in SCALAR_READS:
        options = state.options.get(RULE.id, {})
        if not options.get("scalars"):
            return None
    return Report(tensors=[source], message=_message(name))


def _message(op_name: str) -> Any:
    call = {"to": "to('cpu')", "__array__": "numpy conversion"}.get(op_name, f"{op_name}()")

    def build(described: list[Any], expression: str) -> str:
        d = described[0]
        shape = d.shape_text
        return (
            f"`{expression}`: {d.name} {shape} {d.dtype} leaves {d.device} for the CPU "
            f"({call}){created(d)}. This copies device memory to the host and waits for the "
            f"device; if it runs every step, keep it on {d.device} or copy once after the loop."
        )

    return build


def _copy_message(described: list[Any], expression: str) -> str:
    src, dst = described
    return (
        f"`{expression}`: copy_ moves {src.name} {src.shape_text} from {src.device} into "
        f"{dst.name} on the CPU{created(src)}."
    )
