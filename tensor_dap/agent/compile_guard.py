"""``torch.compile`` under the watch: compiled code runs, and dynamo never traces tensor-dap.

Inside a compiled function every op still reaches the watch's mode; dynamo cannot trace the
mode (its ``__torch_function__`` is C, or Python that reads frames), breaks the graph there and
runs the op eagerly through it — and then tries to compile each Python function of tensor-dap
the mode calls, fails on the first C builtin it meets, and warns on the program's stderr
("Dynamo does not know how to trace the builtin `posix._path_normpath`"). Putting this package on
dynamo's skip list keeps tensor-dap's frames out of dynamo: no warning, no wasted compile.

Dynamo costs a second to import, so it is not imported here: the skip is registered at once when
it is already loaded, else by a thin wrapper around ``torch.compile`` at its first call.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import torch

_MARK = "_tensor_dap_compile_guard"
_registered = False


def install() -> None:
    """Register the skip now if dynamo is loaded; wrap ``torch.compile`` (once; it stays)."""
    if "torch._dynamo" in sys.modules:
        _skip_tensor_dap()
    original = torch.compile
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def compile(*args: Any, **kwargs: Any) -> Any:  # noqa: A001 - torch's own name
        _skip_tensor_dap()
        return original(*args, **kwargs)

    setattr(compile, _MARK, True)
    torch.compile = compile


def _skip_tensor_dap() -> None:
    global _registered
    if _registered:
        return
    _registered = True
    try:
        from torch._dynamo import trace_rules

        trace_rules.add("tensor_dap")
    except Exception:  # a torch without this private API: dynamo then warns, nothing worse
        pass
