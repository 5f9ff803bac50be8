"""Whether the engine's per-op path runs in C (``_fastpath``) or in Python.

The C twin (``_fastpath.c``) is built at install time on CPython 3.11+ when a compiler is
there; it runs the same steps as :func:`tensor_dap.agent.engine.handle_op` and the Python
operator shadows, calling the same Python rules, planner and sampler. Set
``TENSOR_DAP_PURE_PYTHON=1`` to run the Python path anyway (the tests run both).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any, Optional


def _load() -> Optional[ModuleType]:
    if os.environ.get("TENSOR_DAP_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from tensor_dap.agent import _fastpath
    except ImportError:  # not built here (no compiler, Python < 3.11, PyPy): the Python path
        return None
    return _fastpath


#: the C module, or None when the Python path runs
fastpath: Optional[ModuleType] = _load()
#: whether the engine runs it (``engine.use_native`` switches)
enabled: bool = fastpath is not None


def configure(pass_marker: Any, plain_types: frozenset[type], ranks_differ: str) -> None:
    """Hand the C path what it needs from torch and the engine (once, at the engine's import)."""
    if fastpath is None:
        return
    import torch

    fastpath.configure(
        pass_marker,
        torch._C._is_torch_function_mode_enabled,
        torch._C._pop_torch_function_stack,
        torch._C._push_on_torch_function_stack,
        plain_types,
        torch.Tensor,
        ranks_differ,
        torch.overrides.handle_torch_function.__code__,
    )
