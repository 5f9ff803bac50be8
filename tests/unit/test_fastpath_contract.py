"""The C fast path reads attributes of the mode, the watch and tensors by name: every name it
reads is listed in ``tensor_dap.agent.native`` and exists on the objects it is read from, so
renaming one on the Python side alone fails here, not in a user's program."""

from __future__ import annotations

import re
from pathlib import Path

import torch

import tensor_dap
from tensor_dap.agent import native
from tensor_dap.agent.mode import WatchMode
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.tensor_map import TensorMap

SOURCE = Path(native.__file__).with_name("_fastpath.c").read_text()


def _names_read_by_c() -> set[str]:
    return set(re.findall(r'PyUnicode_InternFromString\("([^"]+)"\)', SOURCE))


def test_every_name_the_c_path_reads_is_listed() -> None:
    listed = set(
        native.MODE_ATTRIBUTES
        + native.WATCH_ATTRIBUTES
        + native.TENSOR_ATTRIBUTES
        + native.BOOKS_ATTRIBUTES
        + native.OP_ATTRIBUTES
        + native.KEYWORDS
    )
    read = _names_read_by_c()
    assert "_plans" in read  # (the pattern still finds them)
    assert read == listed


def test_the_listed_names_exist_where_the_c_path_reads_them() -> None:
    with tensor_dap.watch(rules=["broadcast", "nan-inf"], memory=True) as watch:
        mode = watch._mode
        assert isinstance(mode, WatchMode)
        for name in native.MODE_ATTRIBUTES:
            assert name in vars(mode), name  # read from the instance dict first
        for name in native.WATCH_INSTANCE_ATTRIBUTES:
            assert name in vars(watch), name
        for name in native.WATCH_METHODS:
            assert callable(getattr(watch, name)), name
        for name in native.TENSOR_ATTRIBUTES:
            assert hasattr(torch.ones(1), name), name
        for name in native.LEDGER_INSTANCE_ATTRIBUTES:
            assert name in vars(watch.memory), name
        for name in native.LEDGER_PROPERTIES:
            assert isinstance(getattr(type(watch.memory), name), property), name
        watch.memory.backward_line = ("x.py", 1)
        watch.memory.grad_leaves  # noqa: B018 (makes this thread's field)
        for name in native.LEDGER_THREAD_FIELDS:  # (where the properties keep them)
            assert name in vars(watch.memory._threads), name
        for name in native.LEDGER_METHODS:
            assert callable(getattr(watch.memory, name)), name
        for name in native.STORAGE_ATTRIBUTES:
            assert hasattr(torch.ones(1).untyped_storage(), name), name
        for name in native.OP_INFO_ATTRIBUTES:
            assert hasattr(OpInfo("add"), name), name
        for name in native.TENSOR_MAP_ATTRIBUTES:
            assert name in vars(TensorMap()), name
        assert hasattr(torch.ops.aten.add, "_op") and hasattr(torch.ops.aten.add.Tensor, "_op")
        # (read from the instance dict; a torch without it has no torchbind branch either)
        assert "_has_torchbind_op_overload" in vars(torch.ops.aten.add)


def test_a_plan_has_the_layout_the_c_path_reads() -> None:
    """``run_op`` reads a plan as ``(info, before, after, observers)``, each ``before`` entry as
    ``(rule id, check, screen)``."""
    with tensor_dap.watch(rules=["broadcast", "nan-inf"]) as watch:
        torch.ones(4) + torch.ones(4, 1)
        plans = [p for p in watch._plans.values() if isinstance(p, tuple) and len(p) == 4]
    (plan,) = [p for p in plans if getattr(p[0], "name", None) == "add"]
    info, before, after, observers = plan
    assert [entry[0] for entry in before] == ["broadcast"]
    assert all(len(entry) == 3 for entry in before)
    assert [entry[0] for entry in after] == ["nan-inf"]
    assert isinstance(observers, tuple)
