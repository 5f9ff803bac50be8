"""``torch.compile`` (and ``torch.jit.trace``) under the watch: compiled code compiles and runs
as without tensor-dap.

Dynamo cannot trace the watch's mode (its ``__torch_function__`` is C, or Python that reads
frames): with the mode on the stack every op would break the graph and run eagerly — a backend
never given a graph, ``fullgraph=True`` raising "Unsupported method call". So a compiled
function or module runs with the watch's mode off the stack (this thread's, for the call):
dynamo traces, compiles and runs the program's code alone, and the rules do not look inside
(what goes in and comes out is watched as usual: a rule that cannot judge an op skips it).
``torch.compile``'s result is wrapped (``model.compile()`` calls it too); compiled modules'
class ``OptimizedModule`` once. Dynamo's skip list also gets this package, so that dynamo never
tries to compile tensor-dap's own frames (a mode pushed inside compiled code, a hook).

``torch.jit.trace`` and ``trace_module`` run so too: the tracer records every op run while it
traces, the rules' own reads included.

Dynamo costs a second to import, so it is not imported here: the skip is registered at once when
it is already loaded, else by a thin wrapper around ``torch.compile`` at its first call.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import torch

_MARK = "_tensor_dap_compile_guard"
_registered = False


def install() -> None:
    """Register the skip now if dynamo is loaded; wrap ``torch.compile`` (once; it stays)."""
    if "torch._dynamo" in sys.modules:
        _skip_tensor_dap()
    _guard_jit_tracing()
    original = torch.compile
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def compile(*args: Any, **kwargs: Any) -> Any:  # noqa: A001 - torch's own name
        _skip_tensor_dap()
        compiled = original(*args, **kwargs)
        model = args[0] if args else kwargs.get("model")
        if model is None or isinstance(compiled, torch.nn.Module):  # a decorator; a module
            return compiled
        return unwatched(compiled) if callable(compiled) else compiled

    setattr(compile, _MARK, True)
    torch.compile = compile


def _guard_jit_tracing() -> None:
    """``torch.jit.trace`` / ``trace_module`` run the traced code with the watch's mode off the
    stack (once; they stay wrapped): the tracer records every op run while it traces, the
    rules' own reads included (``out.numel() == 1`` became a graph node and a TracerWarning
    naming tensor-dap's file), and the traced result runs as TorchScript, which no mode sees."""
    jit = torch.jit
    for name in ("trace", "trace_module"):
        original = getattr(jit, name, None)
        if callable(original) and not getattr(original, _MARK, False):
            setattr(jit, name, unwatched(original))


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
    try:
        from torch._dynamo.eval_frame import OptimizedModule

        if not getattr(OptimizedModule.__call__, _MARK, False):
            OptimizedModule.__call__ = unwatched(OptimizedModule.__call__)  # type: ignore[method-assign]
    except Exception:  # a torch without it: compiled modules run eagerly under the watch
        pass


def unwatched(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` run with the watch's mode off this thread's stack, when it is on top."""
    from tensor_dap.agent.mode import WatchMode  # (the engine imports this module)

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        top = torch.overrides._get_current_function_mode()  # type: ignore[no-untyped-call]
        if not isinstance(top, WatchMode):
            return function(*args, **kwargs)
        with torch.overrides._pop_mode_temporarily():
            return function(*args, **kwargs)

    setattr(run, _MARK, True)
    return run
