"""``out-of-memory``: an op runs out of device memory; stop at the user's line that called
it, before the stack unwinds, with the lines that made the tensors holding the memory.

The engine hands a rule's ``raised`` hook the error an op raised (nothing is paid until an op
raises). ``torch.OutOfMemoryError`` (a CUDA or other accelerator allocator's) and the CPU
allocator's "can't allocate memory" are out-of-memory errors. The report names the device, its
live tensor bytes and the lines that made them (:mod:`tensor_dap.agent.memory_table`); the
error itself then goes on unchanged: the program fails exactly as it would without tensor-dap.
"""

from __future__ import annotations

import re
from types import FrameType
from typing import Any, Optional

import torch

from tensor_dap import catalog
from tensor_dap.agent.memory_table import live_table, table_text
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.rules import Report
from tensor_dap.agent.rules.hooks import Args, Kwargs
from tensor_dap.tensor_text import size_text

RULE = catalog.rule("out-of-memory")

_OOM_TYPE: Any = getattr(torch, "OutOfMemoryError", None) or getattr(
    torch.cuda, "OutOfMemoryError", None
)
_CPU_ALLOCATOR = "DefaultCPUAllocator: can't allocate memory"
#: "GPU 0 has a total capacity..." in CUDA's message: the device that ran out
_CUDA_INDEX = re.compile(r"\bGPU (\d+)\b")


def is_out_of_memory(error: BaseException) -> bool:
    if _OOM_TYPE is not None and isinstance(error, _OOM_TYPE):
        return True
    return isinstance(error, RuntimeError) and _CPU_ALLOCATOR in str(error)


def raised(
    op: OpInfo, args: Args, kwargs: Kwargs, error: BaseException, caller: FrameType, state: Any
) -> Optional[Report]:
    if not is_out_of_memory(error):
        return None
    device = _device(args, error, (kwargs or {}).get("device"))
    live, rows = live_table(state, device)
    said = _first_line(error)
    name = f"{type(error).__module__}.{type(error).__name__}".replace("builtins.", "")
    text = (
        f"ran out of memory on {device} ({name}{': ' + said if said else ''}). Live tensors on "
        f"{device}: {size_text(live)}, made at: {table_text(rows)}. Continuing lets the error go "
        "on as it would have."
    )
    return Report(tensors=[], message=lambda _described, expression: f"`{expression}` {text}")


def _device(args: Args, error: BaseException, device: Any) -> str:
    """The device that ran out: CUDA's message names it; else the op's ``device=`` or its first
    tensor's; else the CPU's, when its allocator said so."""
    text = str(error)
    match = _CUDA_INDEX.search(text)
    if match is not None:
        return f"cuda:{match.group(1)}"
    if device is not None:
        try:
            asked = torch.device(device)
        except (RuntimeError, TypeError):
            pass
        else:  # `device="cuda"` allocates on the current device, named as tensors name it
            if asked.index is None and asked.type != "cpu":
                return f"{asked.type}:{_current_index(asked.type)}"
            return str(asked)
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return str(arg.device)
    if _CPU_ALLOCATOR in text or not torch.cuda.is_available():
        return "cpu"
    return f"cuda:{torch.cuda.current_device()}"


def _current_index(kind: str) -> int:
    """The current device index of backend ``kind`` (``torch.cuda.current_device()``), 0 when
    the backend does not say."""
    try:
        return int(getattr(torch, kind).current_device())
    except Exception:  # a backend module without current_device(), or not initialised
        return 0


#: what the CPU allocator's message starts with before it says anything
_ENFORCE = re.compile(r"^\[enforce fail at [^\]]*\] err == 0\. ")


def _first_line(error: BaseException, width: int = 200) -> Optional[str]:
    lines = [line for line in str(error).splitlines() if line.strip()]
    if not lines:
        return None
    first = _ENFORCE.sub("", lines[0].strip())
    return first if len(first) <= width else first[: width - 3] + "..."
