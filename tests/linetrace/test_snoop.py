"""``tensor_dap.snoop()`` in-process: decorator and context manager, TorchSnooper's examples."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
import torch

import tensor_dap
from tensor_dap.linetrace import backends
from tensor_dap.linetrace.output import Sink
from tensor_dap.linetrace.tracer import Tracer
from tensor_dap.testing import pick_device
from tests.linetrace.entries import Entry, after_line, parse


def test_decorator_on_masked_scatter() -> None:
    device = pick_device()
    out = io.StringIO()

    @tensor_dap.snoop(output=out)
    def myfunc(mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        y = torch.zeros(6)
        y.masked_scatter_(mask, x)
        return y

    mask = torch.tensor([0, 1, 0, 1, 1, 0], device=device, dtype=torch.bool)
    source = torch.tensor([1.0, 2.0, 3.0], device=device)
    before = sys.gettrace()
    with pytest.raises(RuntimeError):
        myfunc(mask, source)
    entries = parse(out.getvalue())
    assert entries[0] == Entry("start", "mask", "tensor<(6,) bool accel:0>", 0)
    assert Entry("new", "y", "tensor<(6,) float32 cpu>", 0) in after_line(
        entries, "y = torch.zeros(6)"
    )
    scatter = after_line(entries, "y.masked_scatter_(mask, x)")
    assert scatter[0].kind == "finding" and scatter[0].name == "device-mismatch"
    assert entries[-1].kind == "exception-value"
    assert sys.gettrace() is before


def test_context_manager_on_the_regression_loop() -> None:
    pick_device()
    lines: list[str] = []
    model = torch.nn.Linear(2, 1)
    x = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    y = torch.tensor([3.0, 5.0, 4.0, 6.0])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tensor_dap.snoop(output=lines.append):
        for _ in range(10):
            optimizer.zero_grad()
            pred = model(x)
            squared_diff = (y - pred) ** 2
            loss = squared_diff.mean()
            loss.backward()
            optimizer.step()
    after = len(lines)
    _ = torch.zeros(3) + 1  # not traced any more
    assert len(lines) == after
    entries = parse("\n".join(lines))
    assert Entry("new", "y", "tensor<(4,) float32 cpu>", 0) in entries
    line = after_line(entries, "squared_diff = (y - pred) ** 2")
    assert line[0].kind == "finding" and line[0].name == "broadcast"
    assert Entry("new", "squared_diff", "tensor<(4, 4) float32 cpu grad PowBackward0>", 0) in line
    assert loss.shape == ()
    summaries = {int(e.name): e.value for e in entries if e.kind == "summary"}
    assert summaries and all(value.endswith("shape stable") for value in summaries.values())


def helper(a: torch.Tensor) -> torch.Tensor:
    doubled = a * 2
    return doubled


def test_depth_watch_and_output_path(tmp_path: Path) -> None:
    log = tmp_path / "snoop.log"

    @tensor_dap.snoop(output=str(log), depth=2, watch=("t.shape[0] + 1",), rules=None)
    def outer(t: torch.Tensor) -> torch.Tensor:
        u = helper(t) + 1
        return u

    outer(torch.ones(5))
    entries = parse(log.read_text())
    assert Entry("new", "doubled", "tensor<(5,) float32 cpu>", 1) in entries
    assert ("start", "t.shape[0] + 1", "6") in {e[:3] for e in entries}
    assert entries[-1] == Entry("return-value", "", "tensor<(5,) float32 cpu>", 0)

    shallow = io.StringIO()
    tensor_dap.snoop(output=shallow, rules=None)(outer.__wrapped__)(torch.ones(2))
    assert "doubled" not in shallow.getvalue()


def test_nan_flags_are_opt_in() -> None:
    out = io.StringIO()

    @tensor_dap.snoop(output=out, nan=True, rules=None)
    def f() -> torch.Tensor:
        bad = torch.tensor([1.0, float("nan"), float("inf")])
        return bad

    f()
    assert Entry("new", "bad", "tensor<(3,) float32 cpu nan inf>", 0) in parse(out.getvalue())


def test_bad_repr_never_breaks_the_program() -> None:
    class Nasty:
        def __repr__(self) -> str:
            raise ValueError("no")

    out = io.StringIO()

    @tensor_dap.snoop(output=out, rules=None)
    def f() -> int:
        thing = Nasty()
        return 1 if thing else 0

    assert f() == 1
    assert Entry("new", "thing", "REPR FAILED", 0) in parse(out.getvalue())


def test_a_tensor_the_program_deletes_dies_as_without_the_trace() -> None:
    """The trace remembers what each name was bound to weakly: ``del t`` frees the tensor (it
    stayed alive until the frame returned), and a list rebound lets its tensors go."""
    import gc
    import weakref

    out = io.StringIO()

    @tensor_dap.snoop(output=out, rules=None)
    def f() -> tuple[bool, bool]:
        t = torch.ones(3)
        kept = weakref.ref(t)
        del t
        gc.collect()
        losses = [torch.zeros(2)]
        item = weakref.ref(losses[0])
        losses = []
        gc.collect()
        return kept() is None, item() is None and losses == []

    assert f() == (True, True)
    assert Entry("new", "t", "tensor<(3,) float32 cpu>", 0) in parse(out.getvalue())


@pytest.mark.skipif(not backends.MONITORING, reason="sys.monitoring needs Python 3.12+")
def test_monitoring_backend() -> None:
    out = io.StringIO()
    tracer = Tracer(Sink(out), roots={helper.__code__})
    backend = backends.MonitoringBackend(tracer)
    backend.start()
    try:
        helper(torch.ones(4))
    finally:
        backend.stop()
        tracer.close()
    entries = parse(out.getvalue())
    assert Entry("new", "doubled", "tensor<(4,) float32 cpu>", 0) in entries
    assert torch.ones(1).shape == (1,)


def test_settrace_backend_restores_the_previous_tracer() -> None:
    before = sys.gettrace()
    backend = backends.SettraceBackend(Tracer(Sink(io.StringIO())))
    backend.start()
    backend.stop()
    assert sys.gettrace() is before


def test_the_call_line_is_the_def_not_the_decorator() -> None:
    out = io.StringIO()

    @tensor_dap.snoop(
        output=out,
        rules=None,
    )
    def decorated(a: torch.Tensor) -> torch.Tensor:
        return a + 1

    decorated(torch.ones(2))
    [call] = [e for e in parse(out.getvalue()) if e.kind == "call"]
    def_line = decorated.__wrapped__.__code__.co_firstlineno + 4  # below the decorator's 4 lines
    assert (call.name, call.value) == (
        str(def_line),
        "def decorated(a: torch.Tensor) -> torch.Tensor:",
    )


def test_returned_tuples_and_lists_of_tensors_are_summaries() -> None:
    out = io.StringIO()

    @tensor_dap.snoop(output=out, rules=None)
    def split(x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        parts = list(x.unbind(0))
        return x.sum(), parts

    split(torch.ones(2, 3))
    entries = parse(out.getvalue())
    row = "tensor<(3,) float32 cpu>"
    assert Entry("new", "parts", f"[{row}, {row}]", 0) in entries
    assert entries[-1] == Entry("return-value", "", f"(tensor<() float32 cpu>, [{row}, {row}])", 0)


def test_a_comprehension_shows_no_interpreter_internals() -> None:
    out = io.StringIO()

    @tensor_dap.snoop(output=out, depth=2, rules=None)
    def doubled(x: torch.Tensor) -> list[torch.Tensor]:
        return [row * 2 for row in x]

    doubled(torch.ones(2, 3))
    names = {e.name for e in parse(out.getvalue()) if e.kind in ("start", "new", "modified")}
    assert names == {"x", "row"} if sys.version_info < (3, 12) else {"x"} <= names
