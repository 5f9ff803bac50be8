"""The engine side of tensor data breakpoints (agent/data_watch.py, data_write.py), on the C and
the Python per-op path: which writes stop, what the stop says, what costs nothing."""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest
import torch

from tensor_dap.agent import data_index, data_watch, data_write, plans
from tensor_dap.agent.engine import Watch

pytestmark = pytest.mark.usefixtures("engine_path")


@pytest.fixture
def stops(monkeypatch: pytest.MonkeyPatch):
    """(line, text) of each pause the debugger would make."""
    seen: list[tuple[int, str]] = []
    monkeypatch.setattr(
        data_write, "suspend_on_write", lambda hit, frame: seen.append((frame.f_lineno, hit.text))
    )
    yield seen
    data_watch.reset()


def _arm(watch: Watch, tensor: Any, label: str, condition: str = "") -> str:
    data_watch.bind(watch)
    data_id = json.loads(data_watch.offer(tensor, label))["dataId"]
    assert data_watch.set_breakpoints([{"dataId": data_id, "condition": condition}]) == {
        data_id: {"verified": True}
    }
    return str(data_id)


def _line() -> int:
    import sys

    return sys._getframe(1).f_lineno


def test_each_kind_of_write_stops_on_its_line(stops: list[tuple[int, str]]) -> None:
    watch = Watch(rules=[])
    w = torch.zeros(4)
    _arm(watch, w, "w")
    lines = []
    with watch:
        other = torch.ones(4)
        other.add_(1)  # not w: no stop
        lines.append(_line() + 1)
        w.add_(1)
        lines.append(_line() + 1)
        w[0] = 5.0
        view = w[1:]
        lines.append(_line() + 1)
        view.mul_(3)
        lines.append(_line() + 1)
        w.data = torch.full((4,), float("nan"))
        lines.append(_line() + 1)
        w.data.copy_(torch.ones(4))  # through the .data alias
        w.mul_(1.0)  # no value changes: no stop
    assert [line for line, _ in stops] == lines
    assert [text for _, text in stops] == [
        "w written by in-place add_: 4 of 4 elements changed, max |change| 1",
        "w written by indexed assignment: 1 of 4 elements changed, max |change| 4",
        "w written by in-place mul_: 3 of 4 elements changed, max |change| 2",
        "w written by .data assignment: 4 of 4 elements changed, 4 became non-finite (NaN/inf)",
        "w written by in-place copy_: 4 of 4 elements changed",
    ]


def test_a_parameter_stops_at_the_step(stops: list[tuple[int, str]]) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    watch = Watch(rules=[])
    _arm(watch, model.bias, "model.bias")
    with watch:
        model(torch.ones(1, 2)).sum().backward()
        line = _line() + 1
        optimizer.step()
    assert stops == [
        (line, "model.bias written by SGD.step(): 2 of 2 elements changed, max |change| 0.5")
    ]


def test_the_condition_is_evaluated_only_on_writes(stops: list[tuple[int, str]]) -> None:
    watch = Watch(rules=[])
    state = torch.ones(2)
    _arm(watch, state, "state", "value.max() > 2.5")
    with watch:
        for _ in range(3):
            state.add_(1)
    assert [text for _, text in stops] == [
        "state written by in-place add_: 2 of 2 elements changed, max |change| 1 "
        "(condition `value.max() > 2.5` holds)",
        "state written by in-place add_: 2 of 2 elements changed, max |change| 1 "
        "(condition `value.max() > 2.5` holds)",
    ]


def test_only_writing_ops_are_planned_and_nothing_is_kept_alive(
    stops: list[tuple[int, str]],
) -> None:
    watch = Watch(rules=[])
    doomed = torch.zeros(3)
    _arm(watch, doomed, "doomed")
    plan = plans.make_plan(watch, torch.Tensor.add)
    assert plan is plans.PASS or all(rule != data_index.HOOK_ID for rule, *_ in plan[1])
    inplace = plans.make_plan(watch, torch.Tensor.add_)
    assert data_index.HOOK_ID in [rule for rule, *_ in inplace[1]]
    del doomed
    gc.collect()
    assert data_index.armed == {}  # the breakpoint went with its tensor
    assert data_index.HOOK_ID not in watch.hooks  # and the write checks with it


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork")
def test_a_forked_child_has_none_of_the_parents_breakpoints(stops: list[tuple[int, str]]) -> None:
    import os

    watch = Watch(rules=[])
    w = torch.zeros(2)
    _arm(watch, w, "w")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its writes of its copy do not stop
        os.close(read)
        os.write(write, str(len(data_index.armed)).encode())
        os._exit(0)
    os.close(write)
    assert os.read(read, 10) == b"0"
    os.waitpid(pid, 0)
    assert len(data_index.armed) == 1  # the parent's stays
