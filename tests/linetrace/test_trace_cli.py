"""``tensor-dap trace`` on TorchSnooper's two documented examples, run as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tensor_dap.cli import main
from tensor_dap.tracedb import TraceReader
from tests.linetrace.entries import Entry, after_line, parse

MASKED_SCATTER = """\
import torch
from tensor_dap.testing import pick_device

device = pick_device()


def myfunc(mask, x):
    y = torch.zeros(6)
    y.masked_scatter_(mask, x)
    return y


mask = torch.tensor([0, 1, 0, 1, 1, 0], device=device, dtype=torch.bool)
source = torch.tensor([1.0, 2.0, 3.0], device=device)
y = myfunc(mask, source)
"""

REGRESSION = """\
import torch
from tensor_dap.testing import pick_device

device = pick_device()
model = torch.nn.Linear(2, 1)

x = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
y = torch.tensor([3.0, 5.0, 4.0, 6.0])

optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range({steps}):
    optimizer.zero_grad()
    pred = model(x)
    squared_diff = (y - pred) ** 2
    loss = squared_diff.mean()
    loss.backward()
    optimizer.step()
"""


def trace(tmp_path: Path, source: str, *extra: str) -> tuple[int, list[Entry], str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    out = tmp_path / "trace.txt"
    command = [sys.executable, "-m", "tensor_dap", "trace", "--output", str(out)]
    command += ["--trace", str(tmp_path / "trace.db"), *extra, str(script)]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    text = out.read_text()
    return done.returncode, parse(text), text


def test_masked_scatter_shows_the_cpu_tensor_and_the_finding(tmp_path: Path) -> None:
    code, entries, text = trace(tmp_path, MASKED_SCATTER)
    assert code == 1, text  # the script fails as it does under python
    assert Entry("start", "mask", "tensor<(6,) bool accel:0>", 1) in entries
    assert Entry("start", "x", "tensor<(3,) float32 accel:0>", 1) in entries
    zeros = after_line(entries, "y = torch.zeros(6)")
    assert Entry("new", "y", "tensor<(6,) float32 cpu>", 1) in zeros
    scatter = after_line(entries, "y.masked_scatter_(mask, x)")
    assert scatter[0].kind == "finding" and scatter[0].name == "device-mismatch"
    assert "y is on cpu" in scatter[0].value
    exceptions = [e for e in entries if e.kind == "exception"]
    assert exceptions[0].name == "9"


def test_regression_shows_the_broadcast_shape_and_finding(tmp_path: Path) -> None:
    code, entries, text = trace(tmp_path, REGRESSION.format(steps=10))
    assert code == 0, text
    line = after_line(entries, "squared_diff = (y - pred) ** 2")
    assert line[0].kind == "finding" and line[0].name == "broadcast"
    assert Entry("new", "squared_diff", "tensor<(4, 4) float32 cpu grad PowBackward0>", 0) in line
    assert ("new", "y", "tensor<(4,) float32 cpu>") in {e[:3] for e in entries}
    assert ("new", "pred", "tensor<(4, 1) float32 cpu grad AddmmBackward0>") in {
        e[:3] for e in entries
    }
    summaries = {e.name: e.value for e in entries if e.kind == "summary"}
    assert summaries["14"] == "10 shape stable"


def test_a_long_loop_gives_a_short_trace(tmp_path: Path) -> None:
    code, entries, text = trace(tmp_path, REGRESSION.format(steps=2000))
    assert code == 0, text
    assert len(text.splitlines()) < 80, text
    summaries = {e.name: e.value for e in entries if e.kind == "summary"}
    assert summaries["14"] == "2000 shape stable"
    assert len([e for e in entries if e.kind == "finding"]) == 1


def test_shape_changes_in_a_hot_loop_are_shown(tmp_path: Path) -> None:
    source = """\
    import torch

    for i in range(100):
        t = torch.zeros(i // 40 + 1)
    """
    code, entries, text = trace(tmp_path, source)
    assert code == 0, text
    shown = [e.value for e in entries if e.name == "t"]
    assert shown == [
        "tensor<(1,) float32 cpu>",
        "tensor<(1,) float32 cpu>",  # the first iterations in full
        "tensor<(1,) float32 cpu>",
        "tensor<(2,) float32 cpu>",  # then only changes of shape
        "tensor<(3,) float32 cpu>",
    ]
    summaries = {e.name: e.value for e in entries if e.kind == "summary"}
    assert summaries["4"] == "100 shape changed 2 times"


def test_a_function_called_from_a_loop_is_summarised_across_calls(tmp_path: Path) -> None:
    """A helper (and its comprehension) called at every step is shown for its first calls, then
    only where a variable's summary differs from the previous call's: a batch of a new shape."""
    source = """\
    import torch


    def inner_step(w, x):
        h = x @ w
        rows = [r.sum() for r in h]
        return h.relu().mean()


    w = torch.randn(4, 3)
    for i in range(200):
        x = torch.randn(8 if i < 100 else 16, 4)
        inner_step(w, x)
    """
    code, entries, text = trace(tmp_path, source)
    assert code == 0, text
    assert len(text.splitlines()) < 120, text
    assert [e.value for e in entries if e.name == "h"] == [
        "tensor<(8, 3) float32 cpu>",  # the first calls in full
        "tensor<(8, 3) float32 cpu>",
        "tensor<(8, 3) float32 cpu>",
        "tensor<(16, 3) float32 cpu>",  # then the call whose batch changed shape
    ]
    summaries = [e.value for e in entries if e.kind == "summary"]
    assert "200 shape changed 1 time" in summaries  # `h = x @ w`, counted over all calls


def test_quiet_calls_show_what_differs_from_the_earlier_calls_only(tmp_path: Path) -> None:
    """A variable a forward rebinds (``x = x.flatten(1)``) is not news in each call; a value
    that turns from a tensor into ``None`` is; a loop inside the function is counted over all
    its calls at the end."""
    source = """\
    import torch


    def forward(x):
        x = x.flatten(1)
        for _ in range(5):
            x = x + 1
        return x


    def maybe(i):
        y = torch.ones(3) if i < 6 else None
        return y


    for i in range(8):
        forward(torch.zeros(2, 3, 4))
        maybe(i)
    """
    code, entries, text = trace(tmp_path, source)
    assert code == 0, text
    assert [e.value for e in entries if e.name == "x" and e.kind == "modified"][:1] == [
        "tensor<(2, 12) float32 cpu>"
    ]
    flattened = [e for e in entries if e.name == "x" and e.value == "tensor<(2, 12) float32 cpu>"]
    # the first 3 calls only: the line in each, and the first 3 runs of the loop's line
    assert len(flattened) == 3 + 3, text
    assert [e.value for e in entries if e.name == "y"] == [
        "tensor<(3,) float32 cpu>",  # the first calls in full
        "tensor<(3,) float32 cpu>",
        "tensor<(3,) float32 cpu>",
        "None",  # then the call where it changed
    ]
    summaries = [e.value for e in entries if e.kind == "summary"]
    assert "40 shape stable" in summaries  # `x = x + 1`, 5 runs in each of the 8 calls


def test_a_quiet_call_shows_a_return_value_whose_summary_changed(tmp_path: Path) -> None:
    """A helper whose branch returns a reduced tensor for one input of the same shape: the
    call that returns ``(4,)`` where earlier calls returned ``(3, 4)`` shows its call, the line
    and the value, and so does the next, which returns ``(3, 4)`` again; then it is quiet."""
    source = """\
    import torch


    def head(x):
        y = x * 2
        if x[0, 0] > 5:
            return y.sum(0)
        return y


    for n in [3, 3, 3, 3, 3, 3, 8, 3, 3]:
        head(torch.full((3, 4), float(n)))
    """
    code, entries, text = trace(tmp_path, source)
    assert code == 0, text
    returned = [e.value for e in entries if e.kind == "return-value"]
    assert returned == [
        "tensor<(3, 4) float32 cpu>",  # the first calls in full
        "tensor<(3, 4) float32 cpu>",
        "tensor<(3, 4) float32 cpu>",
        "tensor<(4,) float32 cpu>",  # the quiet call whose return changed
        "tensor<(3, 4) float32 cpu>",  # and the next, changed back
    ], text
    # (each shown in its order: the caller's line, the call, then its lines)
    reduced = text.index("Return value:.. tensor<(4,)")
    assert text.rindex("call      4", 0, reduced) > text.rindex("head(torch.full", 0, reduced)
    assert text.rindex("return y.sum(0)", 0, reduced) > text.rindex("call      4", 0, reduced)


def test_only_and_depth(tmp_path: Path) -> None:
    source = """\
    import torch

    def inner(a):
        b = a * 2
        return b

    def outer(a):
        c = inner(a) + 1
        return c

    z = outer(torch.ones(3))
    """
    _, entries, _ = trace(tmp_path, source, "--only", "inner")
    assert {e.name for e in entries if e.kind in ("new", "start")} == {"a", "b"}
    _, entries, _ = trace(tmp_path, source, "--depth", "2")
    names = {e.name for e in entries if e.kind in ("new", "start")}
    assert "c" in names and "b" not in names


def test_tracedb_gets_the_observations(tmp_path: Path) -> None:
    trace(tmp_path, REGRESSION.format(steps=3))
    script = str(tmp_path / "script.py")
    with TraceReader(tmp_path / "trace.db") as reader:
        rows = {(o.line, o.name): o for o in reader.observations_for(script)}
    row = rows[(14, "squared_diff")]
    assert row.shape == (4, 4) and row.device == "cpu" and row.requires_grad
    assert row.hits == 3
    assert row.col == len("    squared_diff = (y - pred) ** 2")


def test_tracedb_describes_modules_and_containers_as_check_does(tmp_path: Path) -> None:
    source = """\
    import torch

    model = torch.nn.Linear(3, 2)
    pair = [torch.zeros(2, 3), torch.ones(4)]
    """
    trace(tmp_path, source)
    with TraceReader(tmp_path / "trace.db") as reader:
        rows = {o.name: o for o in reader.observations_for(str(tmp_path / "script.py"))}
    assert rows["model"].summary == "Linear 8 params cpu"
    assert rows["pair"].summary == "list[2] of ((2, 3), (4,)) cpu"


def test_an_empty_script_prints_nothing(tmp_path: Path) -> None:
    code, entries, text = trace(tmp_path, "")
    assert code == 0 and text == ""


def test_no_interpreter_internals_as_variables(tmp_path: Path) -> None:
    source = '''\
    """The module's docstring."""
    import torch


    def rows(x):
        return [row * 2 for row in x]


    doubled = rows(torch.ones(2, 3))
    '''
    _, entries, _ = trace(tmp_path, source, "--rules", "")
    names = {e.name for e in entries if e.kind in ("start", "new", "modified")}
    assert (
        names == {"rows", "doubled", "x", "row"}
        if sys.version_info < (3, 12)
        else {
            "rows",
            "doubled",
            "x",
        }
        <= names
    )


def test_usage_does_not_call_args_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as missing:
        main(["trace"])
    assert missing.value.code == 2
    error = capsys.readouterr().err
    assert "SCRIPT is required" in error and "args" not in error.lower()
    with pytest.raises(SystemExit):
        main(["trace", "--help"])
    assert capsys.readouterr().out.startswith("usage: tensor-dap trace [options] SCRIPT [ARGS...]")
