"""Nothing the engine keeps changes what a program can do: ``swap_tensors`` (and ``nn.Module``
conversions that swap parameters), ``copy.deepcopy``, ``torch.save``/``load``, pickling of
modules and optimizers — under every rule, with the engine's tables full of the program's
tensors, and through the real ``tensor-dap check``."""

from __future__ import annotations

import contextlib
import copy
import io
import pickle
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import tensor_dap


@pytest.fixture
def swap_on_conversion():
    was = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    yield
    torch.__future__.set_swap_module_params_on_conversion(was)


def _trained() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(3):
        optimizer.zero_grad(set_to_none=False)
        model(torch.randn(5, 4)).pow(2).mean().backward()
        optimizer.step()
    return model, optimizer


def test_modules_swap_their_parameters_on_conversion(swap_on_conversion) -> None:  # noqa: ANN001
    with tensor_dap.watch(rules="all") as watch:
        model, _ = _trained()
        weight = model[0].weight
        model.to(torch.float64)  # swaps each parameter (and its .grad) with its converted copy
        assert model[0].weight is weight and weight.dtype == torch.float64
        assert weight.grad.dtype == torch.float64
        model(torch.randn(2, 4, dtype=torch.float64)).sum().backward()
    assert watch.failed == {}


def test_swap_tensors_keeps_each_tensors_origin() -> None:
    with tensor_dap.watch(rules="default") as watch:
        a = torch.zeros(3)
        b = torch.ones(3)
        torch.utils.swap_tensors(a, b)
    # the objects swapped their contents: a now holds the ones, made on the `b = ` line
    assert watch.provenance.lookup(a).op == "ones"
    assert watch.provenance.lookup(b).op == "zeros"


def test_a_refused_swap_still_raises_and_changes_nothing() -> None:
    with tensor_dap.watch(rules="default") as watch:
        a = torch.zeros(3)
        b = torch.ones(3)
        user_reference = weakref.ref(a)  # the program's own: swap_tensors must still refuse
        with pytest.raises(RuntimeError, match="Cannot swap t1 because it has weakref"):
            torch.utils.swap_tensors(a, b)
    assert user_reference() is a
    assert watch.provenance.lookup(a).op == "zeros"
    assert watch.provenance.lookup(b).op == "ones"


def test_deepcopy_save_load_and_pickle_work_under_the_watch() -> None:
    with tensor_dap.watch(rules="all") as watch:
        model, optimizer = _trained()
        ema = copy.deepcopy(model)
        buffer = io.BytesIO()
        torch.save({"model": model, "optimizer": optimizer.state_dict()}, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        restored = pickle.loads(pickle.dumps((model, optimizer)))
    assert torch.equal(ema[0].weight, model[0].weight)
    assert torch.equal(loaded["model"][2].bias, model[2].bias)
    assert torch.equal(restored[0][0].weight, model[0].weight)
    assert watch.failed == {}


SCRIPT = """
import copy, io, pickle
import torch
from torch import nn

torch.__future__.set_swap_module_params_on_conversion(True)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    optimizer.zero_grad()
    model(torch.randn(5, 4)).pow(2).mean().backward()
    optimizer.step()
model.to(torch.float64)
ema = copy.deepcopy(model)
pickle.loads(pickle.dumps(optimizer))
print(model[0].weight.dtype, ema[2].bias.dtype)
"""


def test_a_program_that_converts_its_model_runs_the_same_under_check(tmp_path: Path, check) -> None:  # noqa: ANN001
    import subprocess

    script = tmp_path / "convert.py"
    script.write_text(SCRIPT)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    run = check(script, rules="all")
    assert plain.returncode == 0, plain.stderr
    assert (run.returncode, run.stdout) == (0, plain.stdout), run.stderr[-2000:]
    assert run.stdout == "torch.float64 torch.float64\n"


COMPILED = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
compiled = torch.compile(model)  # inductor, torch's default
x, y = torch.randn(32, 8), torch.randn(32, 1)
for _ in range(3):
    optimizer.zero_grad()
    loss = ((compiled(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
    print(f"{loss.item():.6f}")
"""


def test_a_compiled_model_trains_the_same_and_quietly_under_check(tmp_path: Path, check) -> None:  # noqa: ANN001
    """Same losses; and dynamo, which cannot trace the watch, neither warns nor tries to
    compile tensor-dap's own functions."""
    import subprocess

    script = tmp_path / "compiled.py"
    script.write_text(COMPILED)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    run = check(script)
    assert plain.returncode == 0, plain.stderr
    assert (run.returncode, run.stdout) == (0, plain.stdout), run.stderr[-2000:]
    assert run.stderr.strip().splitlines() == ["tensor-dap: no findings"], run.stderr[-2000:]


COMPILED_GRAPHS = """
import torch
from torch import nn

graphs = []


def counting(gm, example_inputs):
    graphs.append(len(gm.graph.nodes))
    return gm.forward


@torch.compile(backend=counting)
def f(x):
    return torch.sin(x).relu() + x.cos()


@torch.compile(backend="eager", fullgraph=True)
def h(t):
    return (t.relu() * 2).mean()


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
compiled = torch.compile(model, backend=counting)
other = nn.Linear(4, 2)
other.compile(backend=counting)
x = torch.randn(3, 4)
print(f(torch.randn(3)).shape, f"{h(torch.randn(5)).item():.4f}")
print(compiled(x).shape, other(x).shape, type(compiled).__name__)
print("graphs given to the backend:", graphs)
"""


def test_compiled_code_is_compiled_under_check(tmp_path: Path, check) -> None:  # noqa: ANN001
    """The watch's mode is off the stack while compiled code runs: the backend is given the
    same graphs as without tensor-dap (it was given none: every op broke the graph), and
    ``fullgraph=True`` compiles (it raised "Unsupported method call")."""
    import subprocess

    script = tmp_path / "graphs.py"
    script.write_text(COMPILED_GRAPHS)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    # (torch 2.14 gives the backend a third graph after these two)
    assert "graphs given to the backend: [6, 9" in plain.stdout
    for rules in ("default", "all"):
        run = check(script, rules=rules)
        assert (run.returncode, run.stdout) == (0, plain.stdout), run.stderr[-2000:]


WARNINGS = """
import warnings
import torch
import torch.nn.functional as F

x = torch.randn(2, 3)
a = F.softmax(x)
b = F.softmax(x * 2)
F.mse_loss(torch.randn(3), torch.randn(1))
torch.randn(2).storage()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    F.softmin(x)
    warnings.warn("mine", stacklevel=0)
print([(w.filename.rsplit("/", 1)[-1], w.lineno) for w in caught])
"""


def test_warnings_from_torch_functions_name_the_programs_lines(tmp_path: Path, check) -> None:  # noqa: ANN001
    """``F.softmax`` without ``dim`` warns at the caller's line: under the watch too (it named
    ``torch/overrides.py``, and the same warning from a second line was dropped)."""
    import subprocess

    script = tmp_path / "warns.py"
    script.write_text(WARNINGS)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert plain.stdout == "[('warns.py', 13), ('warns.py', 14)]\n"
    assert plain.stderr.count("warns.py:") == 4, plain.stderr
    run = check(script, rules="default")
    assert run.stdout == plain.stdout
    tool_lines = [line for line in run.stderr.splitlines() if line.startswith("tensor-dap")]
    assert [line for line in run.stderr.splitlines() if line not in tool_lines] == (
        plain.stderr.splitlines()
    )


LOGGED = """
import torch
from torch import nn

calls = []


class Logged(torch.Tensor):
    \"\"\"Logs every torch function called on it, as tracing and debugging subclasses do.\"\"\"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        calls.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
x = torch.randn(3, 4).as_subclass(Logged)
loss = model(x).pow(2).mean()
loss.backward()
total = (x * 2 + x).sum()
out = model(torch.randn(3, 4))  # (a backward handed a logged gradient: torch's types say Tensor)
out.backward(gradient=torch.ones_like(out).as_subclass(Logged))
print(sorted(set(calls)), len(calls))
"""


SCRIPTED = """
import warnings
import torch
import torch.nn.functional as F
from torch import nn

@torch.jit.script
def safe_div(a: torch.Tensor, b: float) -> torch.Tensor:
    if b == 0.0:
        warnings.warn("division by zero: a is returned")
        return a
    return F.softmax(a / b, dim=-1)

scripted = torch.jit.script(nn.Sequential(nn.Linear(4, 3), nn.Softmax(-1)))
print(safe_div(torch.ones(2), 2.0).tolist(), safe_div(torch.ones(2), 0.0).tolist())
print(scripted(torch.ones(1, 4)).shape)
"""


def test_torchscript_compiles_functions_that_warn(tmp_path: Path, check) -> None:  # noqa: ANN001
    """TorchScript knows ``warnings.warn`` by identity (``aten::warn``): the watch's wrapper of
    it (warnings name the program's lines) is known the same, or ``torch.jit.script`` of
    anything calling it (``F.softmax``, the losses) raised a TypeError."""
    import subprocess

    script = tmp_path / "scripted.py"
    script.write_text(SCRIPTED)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    run = check(script, rules="default")
    assert (run.returncode, run.stdout) == (0, plain.stdout), run.stderr[-2000:]
    assert "division by zero: a is returned" in run.stderr


def test_a_subclass_sees_only_the_programs_own_torch_functions(
    tmp_path: Path,
    check,
    engine_path,  # noqa: ANN001
) -> None:
    """The rules read the op's tensors (``.device``, ``.grad_fn``, ``is_floating_point()``,
    storages): a subclass whose ``__torch_function__`` logs its calls must not see those reads,
    only the program's ops, on either engine path and with the memory books."""
    import subprocess

    script = tmp_path / "logged.py"
    script.write_text(LOGGED)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    for extra in ((), ("--memory",)):
        run = check(script, rules="all", extra=extra, env=engine_path)
        assert (run.returncode, run.stdout) == (0, plain.stdout), run.stderr[-2000:]


def _checkpointed_training(hook_context: Any) -> tuple[int, int, list[float]]:
    """Three steps of a model whose block is checkpointed (and a block whose activations
    ``save_on_cpu`` would move to the host), with an in-place write in the loop (what has
    ``inplace-saved`` look at the graphs): how many times each block's forward ran, and the
    losses."""
    from torch.utils.checkpoint import checkpoint

    runs = {"checkpointed": 0, "offloaded": 0}

    class Block(nn.Module):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name
            self.linear = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            runs[self.name] += 1
            return torch.tanh(self.linear(x)).sin()

    torch.manual_seed(0)
    first, second = Block("checkpointed"), Block("offloaded")
    optimizer = torch.optim.SGD([*first.parameters(), *second.parameters()], lr=0.1)
    losses = []
    with hook_context():
        for _ in range(3):
            optimizer.zero_grad()
            h = checkpoint(first, torch.randn(4, 8), use_reentrant=False)
            with torch.autograd.graph.save_on_cpu():
                out = second(h)
            scratch = out.detach().clone()
            scratch.mul_(2)  # an in-place write of user code while the graph lives
            loss = out.pow(2).mean()
            loss.backward()
            optimizer.step()
            losses.append(round(loss.item(), 6))
    return runs["checkpointed"], runs["offloaded"], losses


def test_saved_tensor_hooks_run_only_when_the_program_unpacks() -> None:
    """Reading what autograd saved runs the program's saved-tensor hooks: checkpoint's
    recomputes the forward, ``save_on_cpu``'s copies back to the device. The engine never
    unpacks a packed saved tensor: the blocks run as often as without tensor-dap (a transformer
    trained with checkpointing ran its attention 15× over under check before)."""
    plain = _checkpointed_training(contextlib.nullcontext)
    watched = _checkpointed_training(lambda: tensor_dap.watch(rules="all", memory=True))
    assert plain[:2] == (6, 3)  # forward + recomputation each step; forward only
    assert watched == plain


PATCHED = """
import collections
import torch
import torch.nn.functional as F
from torch import nn

calls = collections.Counter()


def counted(name, original):
    def replacement(*args, **kwargs):
        calls[name] += 1
        return original(*args, **kwargs)
    return replacement


NAMES = ("__getitem__", "__setitem__", "__len__", "__iter__", "__neg__", "__rsub__", "__iadd__")
for name in NAMES:
    setattr(torch.Tensor, name, counted(name, getattr(torch.Tensor, name)))
F.relu = counted("relu", F.relu)

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 4, device=device)
for step in range(3):
    optimizer.zero_grad()
    loss = (model(x[:, :4]) - x[:, :1]).pow(2).mean()
    loss.backward()
    optimizer.step()
x[0] = 0
x += 1
rows = [len(r) for r in x]
print(sorted(calls.items()), (1 - -x).shape, len(rows))
"""


@pytest.mark.parametrize("simulate", [False, True], ids=["check", "simulate-cuda"])
def test_a_programs_own_replacement_of_a_torch_method_runs_once_per_call(
    tmp_path: Path,
    check,
    engine_path,
    simulate: bool,  # noqa: ANN001
) -> None:
    """A program (or a library) that replaces ``torch.Tensor.__getitem__`` or ``F.relu`` with a
    function calling the original sees its replacement run once per call under ``check``, as
    without it (torch hands a mode the replacement while the original runs: the watch's mode,
    and the simulation's below it, ran it again)."""
    import subprocess

    script = tmp_path / "patched.py"
    script.write_text(PATCHED)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    extra = ("--simulate", "cuda") if simulate else ()
    run = check(script, rules="all", extra=extra, env=engine_path)
    assert (run.returncode, run.stdout) == (0, plain.stdout), run.stderr[-2000:]
    assert "('__getitem__', 6)" in plain.stdout and "('relu', 3)" in plain.stdout


def test_a_finding_through_a_replaced_torch_function_names_the_line_calling_it(
    tmp_path: Path,
    check,  # noqa: ANN001
) -> None:
    """The rules judge the op by torch's name (``mse_loss``) at the program's line that called
    the replacement, not inside the replacement (which stands for torch's function)."""
    script = tmp_path / "replaced_loss.py"
    script.write_text(
        "import torch\n"
        "import torch.nn.functional as F\n"
        "original = F.mse_loss\n"
        "def logged_mse(input, target, *args, **kwargs):\n"
        "    return original(input, target, *args, **kwargs)\n"
        "F.mse_loss = logged_mse\n"
        "pred = torch.randn(4, 1, requires_grad=True)\n"
        "y = torch.randn(4)\n"
        "loss = F.mse_loss(pred, y)\n"
        "loss.backward()\n"
    )
    run = check(script)
    findings = [(f["rule"], f["line"]) for f in run.findings]
    assert findings == [("broadcast", 9)], run.stderr[-2000:]


THREADS = """
import os
import threading

import torch
from torch.utils.data import DataLoader, TensorDataset

results = []


def work(i):
    results.append(float((torch.ones(3) * i).sum()))


workers = [threading.Thread(target=work, args=(i,)) for i in range(3)]
for worker in workers:
    worker.start()
for thread in threading.enumerate():  # join every thread but this one
    if thread is not threading.current_thread():
        thread.join()
print(sorted(results), threading.active_count(), len(threading.enumerate()))
data = TensorDataset(torch.arange(8.0))
loader = DataLoader(data, batch_size=4, num_workers=2, multiprocessing_context="fork")
print([float(b.sum()) for (b,) in loader])
"""


def test_tensor_dap_threads_are_not_the_programs(tmp_path: Path, check) -> None:  # noqa: ANN001
    """The trace's flusher thread is not in ``threading.enumerate()`` or ``active_count()``: a
    program joining every thread but its own finishes (it waited for the flusher for ever), and
    forked DataLoader workers still start and end."""
    import subprocess

    script = tmp_path / "threads.py"
    script.write_text(THREADS)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    run = check(script)
    assert (run.returncode, run.stdout) == (0, plain.stdout), run.stderr[-2000:]
    assert plain.stdout.startswith("[0.0, 3.0, 6.0] 1 1\n")


def test_jit_trace_records_the_programs_ops_alone() -> None:
    """``torch.jit.trace`` under the watch: the traced graph is the plain one (the rules' own
    reads recorded nothing) and its warnings are torch's own (no TracerWarning names
    tensor-dap's files)."""
    import warnings

    import torch.nn.functional as F

    def step(t: torch.Tensor) -> torch.Tensor:
        return F.gelu(t) + F.softmax(t, -1) + t.sum()

    def traced_with_warnings() -> tuple[Any, list[str]]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            traced = torch.jit.trace(step, x)
        return traced, [f"{w.filename.rsplit('/', 1)[-1]}: {w.message}" for w in caught]

    x = torch.randn(2, 4)
    plain, plain_warnings = traced_with_warnings()
    with tensor_dap.watch() as watch:
        traced, watched_warnings = traced_with_warnings()
        out = traced(x)
    assert watched_warnings == plain_warnings
    assert str(traced.graph) == str(plain.graph)
    assert torch.equal(out, plain(x)) and watch.findings == []
