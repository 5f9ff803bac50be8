"""Whether the engine's per-op path runs in C (``_fastpath``) or in Python.

The C twin (``_fastpath.c``) is built at install time on CPython 3.11+ when a compiler is
there; it runs the same steps as :func:`tensor_dap.agent.mode.handle_op` and the Python
operator shadows, calling the same Python rules, planner and sampler. Set
``TENSOR_DAP_PURE_PYTHON=1`` to run the Python path anyway (the tests run both).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any, Optional


def _load() -> Optional[ModuleType]:
    if os.environ.get("TENSOR_DAP_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module("tensor_dap.agent._fastpath")
    except ImportError:  # not built here (no compiler, Python < 3.11, PyPy): the Python path
        return None


#: the C module, or None when the Python path runs
fastpath: Optional[ModuleType] = _load()
#: whether the engine runs it (``mode.use_native`` switches)
enabled: bool = fastpath is not None


#: What the C path reads *by name* (``PyUnicode_InternFromString`` in ``_fastpath.c``), and on
#: which object: rename one of these on the Python side and the C side must change with it
#: (``tests/unit/test_fastpath_contract.py`` parses the C file and checks both sides). The
#: instance attributes are read from the instance ``__dict__`` first (``own_attr``), so they
#: must stay plain instance attributes; the methods are called as ``watch.<name>(...)``.
#: The plan tuples it reads by position are described in :mod:`tensor_dap.agent.plans`.
MODE_ATTRIBUTES = ("watch",)  # on the mode (tensor_dap.agent.mode.WatchMode)
#: on the Watch (``memory``: its books, read by ``books_after``)
WATCH_INSTANCE_ATTRIBUTES = ("_mode", "_plans", "_site_hits", "_raise_hooks", "memory")
WATCH_METHODS = ("_plan", "_sample", "_emit", "_rule_failed", "_raised")  # of the Watch
#: of torch.Tensor (``ndim``: the broadcast rule's screen; the others: the memory books')
TENSOR_ATTRIBUTES = ("ndim", "untyped_storage", "device", "grad")
#: keyword arguments of an op it reads (``inplace``: the flag inplace-saved screens by)
KEYWORDS = ("inplace",)
WATCH_ATTRIBUTES = WATCH_INSTANCE_ATTRIBUTES + WATCH_METHODS
#: what ``books_after`` reads of the memory books (tensor_dap.agent.memory.MemoryLedger), of a
#: tensor's untyped storage and of the op's OpInfo
LEDGER_INSTANCE_ATTRIBUTES = (
    "_entries",
    "_live",
    "_peak",
    "_by_site",
    "_since_sweep",
    "_interval",
    "_pending",
    "_over",
    "limit",
    "_threads",
)
#: read and written as attributes (per thread: properties of the class), or as the fields of
#: ``_threads`` they are kept in (the C path reads those first: no Python call)
LEDGER_PROPERTIES = ("backward_line", "grad_leaves")
LEDGER_THREAD_FIELDS = ("line", "leaves")
LEDGER_METHODS = ("_add", "_insert")
STORAGE_ATTRIBUTES = ("_cdata", "data_ptr", "_weak_ref", "nbytes")
OP_INFO_ATTRIBUTES = ("name", "backward")
#: of the TensorMap of a backward() line's leaves (``id -> (weak reference, value)``)
TENSOR_MAP_ATTRIBUTES = ("_table",)
#: of torch.ops' OpOverloadPacket / OpOverload: the C function their ``__call__`` calls
OP_ATTRIBUTES = ("_op", "_has_torchbind_op_overload")
BOOKS_ATTRIBUTES = (
    LEDGER_INSTANCE_ATTRIBUTES
    + LEDGER_PROPERTIES
    + LEDGER_THREAD_FIELDS
    + LEDGER_METHODS
    + STORAGE_ATTRIBUTES
    + OP_INFO_ATTRIBUTES
    + TENSOR_MAP_ATTRIBUTES
)


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
    try:  # (a torch without them: their ops run through their own __call__)
        from torch._library.fake_class_registry import FakeScriptObject

        torchbind: Any = torch._ops.TorchBindOpOverload
    except (ImportError, AttributeError):
        FakeScriptObject = torchbind = None  # type: ignore[assignment,misc]
    fastpath.configure_ops(
        torch._ops.OpOverloadPacket, torch._ops.OpOverload, torchbind, FakeScriptObject
    )
