"""Warnings raised inside torch functions name the program's line, as without tensor-dap.

``warnings.warn(msg, stacklevel=2)`` in a torch function (``F.softmax`` without ``dim``,
``F.mse_loss`` with mismatched sizes, ``Tensor.storage()``) names the frame calling it. Under any
``TorchFunctionMode`` that call goes through ``torch.overrides.handle_torch_function``, which calls
the function again from the mode: the frame two up from the warning is then
``handle_torch_function``'s (``torch/overrides.py:1771``), the user's line is lost, and the
default "once per location" filter drops the same warning from the program's other lines. So
``warnings.warn`` is wrapped (once; it stays, like the other wrappers): frames between the
warning and where it would land are counted as without the mode — ``handle_torch_function`` and
the public function that dispatched to it are one frame, tensor-dap's own frames none — and
CPython's ``warn`` is called with the stack level that lands there: its filters, registry and
``catch_warnings`` see what they would see without tensor-dap. (A warning raised by C++,
``TORCH_WARN``, names the Python frame running the op, which the C path leaves as it is.)
"""

from __future__ import annotations

import functools
import sys
import warnings
from types import FrameType
from typing import Any, Optional

import torch

from tensor_dap.agent import frames
from tensor_dap.agent.dispatch_frames import handed_over

_MARK = "_tensor_dap_warning_lines"
_DISPATCH = torch.overrides.handle_torch_function.__code__


def install() -> None:
    """Wrap ``warnings.warn`` (once)."""
    original = warnings.warn
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def warn(
        message: Any, category: Any = None, stacklevel: int = 1, *args: Any, **kwargs: Any
    ) -> None:
        level = stacklevel if stacklevel > 1 else 1  # (0 and below name the caller, as 1)
        extra = _dispatch_frames(sys._getframe(1), level) if level > 1 else 0
        original(message, category, level + 1 + extra, *args, **kwargs)

    setattr(warn, _MARK, True)
    _known_to_torchscript(warn)
    warnings.warn = warn


def _known_to_torchscript(warn: Any) -> None:
    """TorchScript compiles a call of ``warnings.warn`` (in ``F.softmax``, the losses, a
    user's scripted function) as its ``aten::warn``, finding it by identity: the wrapper is
    registered the same, or ``torch.jit.script`` would try to compile it as Python and fail."""
    try:
        from torch.jit import _builtins

        # (the list holds the wrapper for good: the table is keyed by id(), built lazily
        # from the list)
        _builtins._builtin_ops.append((warn, "aten::warn"))
        if _builtins._builtin_table is not None:
            _builtins._register_builtin(warn, "aten::warn")
    except (ImportError, AttributeError):  # another torch: scripting is as it finds it
        pass


def _dispatch_frames(warner: FrameType, stacklevel: int) -> int:
    """How many frames on the way ``stacklevel`` up from ``warner`` are there only because of
    a mode: ``handle_torch_function`` and the function that dispatched to it (through the
    watch's shortcut: that function's first frame alone), tensor-dap's."""
    extra = 0
    frame: Optional[FrameType] = warner
    for _ in range(stacklevel - 1):
        below, frame = frame, frame.f_back if frame is not None else None
        while frame is not None:
            if frame.f_code is _DISPATCH:
                dispatcher = frame.f_back
                frame = dispatcher.f_back if dispatcher is not None else None
                extra += 2
            elif frames.is_tensor_dap_code(frame.f_code) or (
                below is not None and handed_over(frame.f_code, frame.f_lineno, below.f_code)
            ):  # (tensor-dap's own; a function that handed itself to the watch's shortcut)
                below, frame = frame, frame.f_back
                extra += 1
            else:
                break
    return extra
