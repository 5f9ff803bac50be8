"""The trace recorder describes what a line binds, and holds on to none of it."""

from __future__ import annotations

import gc
import weakref

import torch

from tensor_dap.agent.engine import Watch
from tensor_dap.agent.recorder import TraceRecorder


def _step(refs: list[weakref.ref]) -> torch.Tensor:
    # the line below binds a CPU tensor a helper-like chain made; the list holds tensors
    moved = torch.ones(4, 3).double()
    pair = [moved * 2, moved.sum(0)]
    refs.extend(weakref.ref(t) for t in (moved, *pair))
    net = torch.nn.Linear(3, 2)
    refs.extend(weakref.ref(p) for p in net.parameters())
    net.weight.requires_grad_(False)
    return pair[0].sum()


def test_rows_describe_bound_values_and_no_tensor_is_kept_alive() -> None:
    recorder = TraceRecorder()
    refs: list[weakref.ref] = []
    watch = Watch(rules=[], recorder=recorder)
    with watch:
        for _ in range(3):
            _step(refs)
    assert len(refs) == 15
    # nothing the recorder saw outlives the frames that held it
    assert [r for r in refs if r() is not None] == []
    gc.collect()
    first = _step.__code__.co_firstlineno
    rows = {(row.line - first, row.name): row for row in recorder.observations()}
    moved = rows[(2, "moved")]
    assert (moved.shape, moved.dtype, moved.summary) == ((4, 3), "float64", None)
    assert rows[(3, "pair")].summary == "list[2] of ((4, 3), (3,)) cpu"
    assert rows[(5, "net")].summary == "Linear 8 params cpu"
    # an in-place method: its receiver, as the line left it
    weight = rows[(7, "net.weight")]
    assert (weight.shape, weight.requires_grad) == ((2, 3), False)
    # `return`: the op that made the returned value
    assert (rows[(8, "return")].shape, rows[(8, "return")].dtype) == ((), "float64")


def _rebinding() -> torch.Tensor:
    a = [torch.zeros(2)]
    a = 3  # noqa: F841  (rebound before the next op: what line 1 bound is gone)
    b = torch.ones(1)
    return b


def test_a_name_rebound_before_it_could_be_read_gets_no_row() -> None:
    recorder = TraceRecorder()
    with Watch(rules=[], recorder=recorder):
        _rebinding()
    first = _rebinding.__code__.co_firstlineno
    rows = {(row.line - first, row.name): row for row in recorder.observations()}
    # not `(2,)`, the tensor torch.zeros made, nor anything for the int
    assert (1, "a") not in rows and (2, "a") not in rows
    assert rows[(3, "b")].shape == (1,)
