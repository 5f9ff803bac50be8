"""``tensor-dap check --memory``: the peak of live tensor memory per device and the user lines
that made it, on stderr and in the JSON report (``"memory"``); views and aliases count their
storage once, freed tensors do not count, and the books keep nothing alive."""

from __future__ import annotations

import gc
import inspect
import json
import os
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import tensor_dap
from tensor_dap.agent.engine import Watch
from tensor_dap.testing import accelerator_device

SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    from tensor_dap.testing import accelerator_device

    device = accelerator_device() if sys.argv[1] == "accel" else torch.device("cpu")
    big = torch.zeros(1000, 1000, device=device)
    views = [big[i] for i in range(10)]
    alias = big.detach()
    small = torch.ones(1000, device=device)
    temp = torch.ones(20000, device=device)
    del temp
    later = torch.ones(2000, device=device)
    print("done")
    """
)
BIG, SMALL, TEMP, LATER = 4_000_000, 4000, 80_000, 8000


@pytest.mark.parametrize("device", ["cpu", "accel"])
def test_the_report_gives_the_peak_and_its_lines(tmp_path: Path, device: str) -> None:
    script = tmp_path / "alloc.py"
    script.write_text(SCRIPT)
    report = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tensor_dap",
            "check",
            "--memory",
            "--report",
            str(report),
            "--trace",
            str(tmp_path / "t.db"),
            str(script),
            device,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"
    memory = json.loads(report.read_text())["memory"]
    name = "cpu" if device == "cpu" else str(accelerator_device())
    assert list(memory) == [name]
    assert memory[name]["peak_bytes"] == BIG + SMALL + TEMP
    top = memory[name]["top"]
    assert [(r["line"], r["op"], r["bytes"], r["count"]) for r in top] == [
        (7, "zeros", BIG, 1),
        (11, "ones", TEMP, 1),
        (10, "ones", SMALL, 1),
    ]
    assert all(r["path"] == str(script) for r in top)
    assert f"{name} peak 3.9 MiB of live tensors" in done.stderr
    assert "alloc.py:7" in done.stderr


def test_without_memory_the_report_has_no_memory(tmp_path: Path) -> None:
    script = tmp_path / "plain.py"
    script.write_text("import torch\nx = torch.ones(3)\n")
    report = tmp_path / "report.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tensor_dap",
            "check",
            "--report",
            str(report),
            "--trace",
            str(tmp_path / "t.db"),
            str(script),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    assert "memory" not in json.loads(report.read_text())


@pytest.mark.parametrize("device", ["cpu", "accel"])
def test_the_books_keep_nothing_alive(device: str) -> None:
    dev = accelerator_device() if device == "accel" else torch.device("cpu")
    watch = Watch(rules=[], memory=True)
    with watch:
        x = torch.randn(100, 100, device=dev, requires_grad=True)
        y = (x * 2).sum()
        refs = [weakref.ref(x), weakref.ref(y)]
        del x, y
        gc.collect()
    assert [r() for r in refs] == [None, None]
    assert watch.memory is not None
    assert watch.memory.live_bytes() == {}


def test_saved_tensors_count_until_backward_frees_them() -> None:
    watch = Watch(rules=[], memory=True)
    with watch:
        w = torch.randn(1000, requires_grad=True)
        loss = (w.exp() * 2).sum()  # exp saves its 4000-byte result
        assert watch.memory is not None
        held = watch.memory.live_bytes()["cpu"]
        loss.backward()
        del loss
        freed = watch.memory.live_bytes()["cpu"]
    # exp's saved result went; backward() made w.grad (4000 bytes), counted as it returned
    assert held - (freed - 4000) >= 4000


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_both_engine_paths_keep_the_same_books(native: bool) -> None:
    from tensor_dap.agent import mode

    mode.use_native(native)
    try:
        watch = Watch(rules=["graph-kept"], memory=True)
        with watch:
            a = torch.ones(100, 10)
            b = a * 2  # an operator: the shadows' path
            c = a.t()  # a view: nothing more
            summary = watch.memory.summary() if watch.memory is not None else {}
        del a, b, c
    finally:
        mode.use_native(True)
    assert summary["cpu"]["peak_bytes"] == 8000
    assert [(r["op"], r["bytes"]) for r in summary["cpu"]["top"]] == [("ones", 4000), ("mul", 4000)]


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
@pytest.mark.parametrize("device", ["cpu", "accel"])
def test_deep_copies_count_under_the_line_that_copies(native: bool, device: str) -> None:
    """``copy.deepcopy`` of a tensor (made inside ``__deepcopy__``, which the mode is handed as
    a metadata function) and of a model (an EMA's: its parameters are cloned) count under the
    copying line, and a backward() afterwards still counts its gradients."""
    import copy

    from tensor_dap.agent import mode

    where = accelerator_device() if device == "accel" else torch.device("cpu")
    mode.use_native(native)
    try:
        with Watch(rules=["graph-kept"], memory=True) as watch:
            weights = torch.ones(100, 10, device=where)
            copied = copy.deepcopy(weights)
            model = torch.nn.Linear(10, 20).to(where)
            ema = copy.deepcopy(model)
            model(torch.ones(1, 10, device=where)).sum().backward()
            assert watch.memory is not None
            top = watch.memory.summary()[str(weights.device)]["top"]
        del weights, copied, model, ema
    finally:
        mode.use_native(True)
    source, first = inspect.getsourcelines(test_deep_copies_count_under_the_line_that_copies)

    def line(text: str) -> int:
        return next(first + i for i, t in enumerate(source) if t.strip().startswith(text))

    lines = {(row["line"], row["op"]): (row["bytes"], row["count"]) for row in top}
    assert lines[(line("copied = "), "__deepcopy__")] == (4000, 1), lines
    # (10 * 20 + 20) floats: cloned by Parameter.__deepcopy__, or a subclass's own __deepcopy__
    assert sum(b for (at, _), (b, _) in lines.items() if at == line("ema = ")) == 880, lines
    assert lines[(line("model(torch.ones"), "grad")] == (880, 2), lines


def _training_books() -> tuple[dict[str, Any], dict[str, int]]:
    """A few training steps, a bigger evaluation batch, then a smaller one (memory grows, is
    freed and reused: new peaks, sweeps): the books' summary and live bytes at the end."""
    from torch import nn

    watch = Watch(rules=[], memory=True)
    with watch:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for batch in (8, 8, 16, 8, 4):
            optimizer.zero_grad()
            loss = model(torch.randn(batch, 32)).square().mean()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            outputs = [model(torch.randn(n, 32)) for n in (64, 2)]
        del outputs
        assert watch.memory is not None
        live = watch.memory.live_bytes()
        summary = watch.memory.summary()
    return summary, live


def test_the_books_in_c_agree_with_the_books_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    from tensor_dap.agent import memory, native

    if native.fastpath is None:
        pytest.skip("the C fast path is not built here")
    assert memory.PLAN_HOOKS.after is native.fastpath.books_after
    in_c = _training_books()
    monkeypatch.setattr(memory.PLAN_HOOKS, "after", memory._after)
    in_python = _training_books()
    assert in_c == in_python
    summary, live = in_c
    assert summary["cpu"]["peak_bytes"] > live["cpu"] > 0
    lines = {row["op"] for row in summary["cpu"]["top"]}
    assert {"linear", "randn"} <= lines


def test_gradients_and_optimizer_state_are_counted_where_they_were_made() -> None:
    """``.grad`` tensors (made by autograd's engine) and an optimizer's state (made inside
    ``step()``, which runs unwatched) are in the books after ``step()``: under the line of
    ``backward()`` and the line calling ``step()``."""
    from torch import nn

    watch = Watch(rules=[], memory=True)
    with watch:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        x, y = torch.randn(8, 32), torch.randn(8, 4)
        for _ in range(3):
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()  # backward line
            optimizer.step()  # step line
        del loss
        assert watch.memory is not None
        live = watch.memory.live_bytes()["cpu"]
        rows = watch.memory.live_top("cpu")[1]
    held = [*model.parameters(), x, y]
    held += [p.grad for p in model.parameters()]
    held += [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    storages = {t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in held}
    assert live == sum(storages.values())
    params = sum(p.numel() * 4 for p in model.parameters())
    lines = {row["op"]: row for row in rows}
    source = Path(__file__).read_text().splitlines()
    assert lines["grad"]["bytes"] == params
    assert source[lines["grad"]["line"] - 1].endswith("# backward line")
    assert lines["Adam.step"]["bytes"] >= 2 * params  # exp_avg, exp_avg_sq (and the steps)
    assert source[lines["Adam.step"]["line"] - 1].endswith("# step line")


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_gradients_count_as_backward_returns_also_without_an_optimizer(native: bool) -> None:
    """Between ``backward()`` and ``step()`` (where an out-of-memory error in Adam's first step
    stops), and in a loop updating its parameters by hand, the ``.grad`` tensors are in the
    books under the ``backward()`` line as soon as it returns."""
    from torch import nn

    from tensor_dap.agent import mode

    mode.use_native(native)
    try:
        watch = Watch(rules=[], memory=True)
        with watch:
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
            w = torch.zeros(1000, requires_grad=True)
            x = torch.randn(8, 32)
            for _ in range(2):
                model.zero_grad()
                (model(x).square().mean() + w.sum()).backward()  # backward line
                assert watch.memory is not None
                rows = {row["op"]: row for row in watch.memory.live_top("cpu")[1]}
                with torch.no_grad():
                    for p in [*model.parameters(), w]:
                        p -= 0.1 * p.grad
    finally:
        mode.use_native(True)
    grads = sum(p.numel() * 4 for p in [*model.parameters(), w])
    source = Path(__file__).read_text().splitlines()
    assert rows["grad"]["bytes"] == grads
    assert source[rows["grad"]["line"] - 1].endswith("# backward line")


class _Logged(torch.Tensor):
    """A tensor subclass of the program's (its ``__torch_function__`` is torch's default)."""


class _UserMode(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("case", ["plain", "subclass leaf", "user mode"])
def test_gradients_are_counted_whatever_reading_them_runs(case: str) -> None:
    """The ``.grad`` of a leaf of a tensor subclass, or read while the program's own torch
    function mode is on, is counted under the ``backward()`` line as a plain parameter's is
    (the C path hands those to the Python function, which reads them with torch functions
    disabled)."""
    import contextlib

    watch = Watch(rules=[], memory=True)
    w = torch.zeros(1000)
    if case == "subclass leaf":
        w = w.as_subclass(_Logged)
    w.requires_grad_()
    x = torch.randn(1000)
    user_mode = _UserMode() if case == "user mode" else contextlib.nullcontext()
    with watch, user_mode:
        for _ in range(2):
            w.grad = None
            (w * x).sum().backward()  # backward line
            assert watch.memory is not None
            rows = {row["op"]: row for row in watch.memory.live_top("cpu")[1]}
    assert rows["grad"]["bytes"] == 4000
    source = Path(__file__).read_text().splitlines()
    # (under the program's own mode its __torch_function__ is the nearest user frame)
    written = "return func(" if case == "user mode" else "# backward line"
    assert written in source[rows["grad"]["line"] - 1]


def test_tensor_types_the_books_did_not_write_count_their_real_memory() -> None:
    """Sparse (COO: indices and values; CSR), quantized, nested and wrapper-subclass tensors:
    counted by the storages that hold their data; meta and empty tensors hold none."""
    import warnings

    from torch.testing._internal.two_tensor import TwoTensor

    watch = Watch(rules=[], memory=True)
    with warnings.catch_warnings(), watch:
        warnings.simplefilter("ignore")  # (beta and prototype layouts say so)
        coo = torch.diag(torch.ones(4)).to_sparse()
        csr = torch.diag(torch.ones(4)).to_sparse_csr()
        quantized = torch.quantize_per_tensor(torch.randn(300), 0.1, 0, torch.qint8)
        nested = torch.nested.nested_tensor([torch.randn(20), torch.randn(30)]) * 2
        pair = TwoTensor(torch.randn(100), torch.randn(100)) * 2
        meta, empty = torch.empty(1000, device="meta"), torch.empty(0)
        assert watch.memory is not None
        rows = [(r["op"], r["bytes"], r["count"]) for r in watch.memory.live_top("cpu")[1]]
    assert watch.failed == {}
    assert ("to_sparse", 2 * 4 * 8 + 4 * 4, 2) in rows  # int64 indices (2, 4), values (4,)
    assert [count for op, _, count in rows if op == "to_sparse_csr"] == [3]  # crow, col, values
    assert ("quantize_per_tensor", 300, 1) in rows
    assert ("mul", (20 + 30) * 4, 1) in rows  # the nested tensor's buffer
    assert ("mul", 2 * 100 * 4, 2) in rows  # the pair's two tensors
    assert "empty" not in {op for op, _, _ in rows}
    del coo, csr, quantized, nested, pair, meta, empty


def test_the_books_agree_with_the_simulated_devices_count_after_each_step(tmp_path: Path) -> None:
    """A CNN trained with Adam on (simulated) CUDA: after each ``optimizer.step()`` the books'
    live bytes on ``cuda:0`` equal ``torch.cuda.memory_allocated()`` — parameters, gradients,
    the optimizer's state and the batch, none missed, none counted twice."""
    script = tmp_path / "agree.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn
            import tensor_dap

            watch = tensor_dap.watch(memory=True, simulate="cuda")
            with watch:
                model = nn.Sequential(
                    nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                    nn.Linear(8 * 8 * 8, 10),
                ).cuda()
                optimizer = torch.optim.Adam(model.parameters())
                x, y = torch.randn(16, 3, 8, 8).cuda(), torch.randint(0, 10, (16,)).cuda()
                for step in range(3):
                    optimizer.zero_grad()
                    loss = nn.functional.cross_entropy(model(x), y)
                    loss.backward()
                    optimizer.step()
                    del loss
                    books = watch.memory.live_bytes()["cuda:0"]
                    print(books, torch.cuda.memory_allocated())
            """
        )
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    assert len(rows) == 3
    assert all(books == allocated for books, allocated in rows), rows
    assert int(rows[0][0]) > 2 * 4 * (8 * 3 * 9 + 8 + 8 * 8 * 8 * 10 + 10)  # params and grads


def test_counting_an_optimizers_tensors_keeps_neither_it_nor_its_model_alive() -> None:
    """A hyperparameter sweep builds and drops models and optimizers under one watch: once the
    program lets them go, the books hold none of them."""
    from torch import nn

    watch = Watch(rules=[], memory=True)
    with watch:
        model = nn.Linear(8, 2)
        optimizer = torch.optim.Adam(model.parameters())
        F.mse_loss(model(torch.randn(4, 8)), torch.randn(4, 2)).backward()
        optimizer.step()
        refs = [weakref.ref(model.weight), weakref.ref(optimizer)]
        del model, optimizer
        gc.collect()
        assert [r() for r in refs] == [None, None]


THREADS = """
import threading
import torch

def train(seed, model, x, y):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(300):
        optimizer.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        optimizer.step()
    results[seed] = round(float(model.weight.sum()), 4)

results = {}
torch.manual_seed(0)
work = [(k, torch.nn.Linear(8, 1), torch.randn(32, 8), torch.randn(32, 1)) for k in range(4)]
threads = [threading.Thread(target=train, args=args) for args in work]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(sorted(results.items()))
"""


def test_threads_training_their_own_models_run_as_without_the_books(check, tmp_path: Path) -> None:
    """Each thread's ``backward()`` line is its own: the books read only that thread's
    ``.grad`` (reading another thread's while its backward, which runs without the GIL, wrote
    it crashed the process in PyTorch's storage objects, most runs)."""
    script = tmp_path / "threads.py"
    script.write_text(THREADS)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    for _ in range(3):
        run = check(script, extra=("--memory",))
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout == plain.stdout
        assert run.report["memory"]["cpu"]["peak_bytes"] > 0


def test_a_parameter_backpropagated_through_can_still_be_swapped() -> None:
    """The books know a backward line's parameters weakly, through a table that steps aside for
    ``torch.utils.swap_tensors`` (a weak reference of their own made swapping fail)."""
    with tensor_dap.watch(memory=True):
        net = torch.nn.Linear(2, 1)
        net(torch.randn(4, 2)).sum().backward()
        torch.utils.swap_tensors(net.weight, torch.nn.Parameter(torch.zeros(1, 2)))
        torch.__future__.set_swap_module_params_on_conversion(True)
        try:
            net(torch.randn(4, 2)).sum().backward()
            net.to(torch.float64)
        finally:
            torch.__future__.set_swap_module_params_on_conversion(False)
    assert net.weight.dtype == torch.float64 and net.weight.sum().item() == 0.0
