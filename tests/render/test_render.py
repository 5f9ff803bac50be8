"""tensor_dap.render over ordinary and exotic tensors, modules and optimizers, and the
"never disturb the debuggee" properties: no version bump, no graph, no grad change, no
reference kept, statistics only when asked."""

from __future__ import annotations

import gc
import subprocess
import sys
import warnings
import weakref
from typing import Any, Callable

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import tensor_dap.render as render
from tensor_dap.agent.describe import describe_tensor
from tensor_dap.linetrace.values import show
from tensor_dap.render.stats import SAMPLE_LIMIT, compute_statistics
from tensor_dap.testing import accelerator_device


class Broken(torch.Tensor):
    """A subclass whose repr and metadata raise."""

    def __repr__(self) -> str:
        raise RuntimeError("repr")

    @property
    def shape(self) -> Any:
        raise RuntimeError("shape")

    @property
    def dtype(self) -> Any:
        raise RuntimeError("dtype")

    @property
    def device(self) -> Any:
        raise RuntimeError("device")

    @property
    def grad_fn(self) -> Any:
        raise RuntimeError("grad_fn")


class Hostile(torch.Tensor):
    """A subclass whose ``__torch_function__`` raises for everything."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError("hostile")


def _fake() -> torch.Tensor:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return torch.randn(3, 4)


EXOTIC: dict[str, Callable[[], Any]] = {
    "broken-subclass": lambda: torch.randn(3).as_subclass(Broken),
    "hostile-subclass": lambda: torch.randn(3).as_subclass(Hostile),
    "sparse-coo": lambda: torch.randn(3, 3).relu().to_sparse(),
    "sparse-csr": lambda: torch.eye(3).to_sparse_csr(),
    "quantized": lambda: torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8),
    "meta": lambda: torch.empty(3, 4, device="meta"),
    "fake": _fake,
    "nested": lambda: torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)]),
    "nested-jagged": lambda: torch.nested.nested_tensor(
        [torch.randn(2, 3), torch.randn(4, 3)], layout=torch.jagged
    ),
    "complex": lambda: torch.randn(5, dtype=torch.complex64),
    "bool": lambda: torch.tensor([True, False, True]),
    "int": lambda: torch.arange(10),
    "half": lambda: torch.randn(4, dtype=torch.float16),
    "0-dim": lambda: torch.tensor(3.5),
    "empty": lambda: torch.empty(0, 3),
    "non-contiguous": lambda: torch.randn(4, 6).t()[::2],
    "huge-expanded": lambda: torch.zeros(1).expand(100_000_000),
    "accelerator": lambda: torch.randn(3, 4, device=accelerator_device()),
    "nan-inf": lambda: torch.tensor([1.0, float("nan"), float("inf")]),
    "parameter": lambda: torch.nn.Parameter(torch.randn(2)),
}


@pytest.mark.parametrize("name", sorted(EXOTIC))
@pytest.mark.filterwarnings("ignore::UserWarning")  # creating prototype layouts warns
def test_exotic_tensors_render(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tensor = EXOTIC[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        line = render.value_line(tensor)
        entries = render.children(tensor)
        stats = render.children(entries[-1].value)
    assert line.startswith("tensor<") and line.endswith(">"), line
    assert len(line) < 120
    names = [entry.name for entry in entries]
    assert names[:7] == ["shape", "dtype", "device", "requires_grad", "grad_fn", "is_leaf", "grad"]
    assert names[-1] == "statistics"
    assert stats and all(isinstance(entry.value, str) for entry in stats)


EXPECTED_LINES = {
    "broken-subclass": "tensor<? ? ? >",
    "sparse-coo": "tensor<(3, 3) float32 cpu sparse_coo>",
    "meta": "tensor<(3, 4) float32 meta>",
    "fake": "tensor<(3, 4) float32 cpu fake>",
    "nested": "tensor<nested(2) float32 cpu nested>",
    "bool": "tensor<(3,) bool cpu>",
    "0-dim": "tensor<() float32 cpu>",
    "empty": "tensor<(0, 3) float32 cpu>",
    "huge-expanded": "tensor<(100000000,) float32 cpu>",
    "accelerator": "tensor<(3, 4) float32 accel:0>",
    "quantized": "tensor<(4,) qint8 cpu>",
    "parameter": "tensor<(2,) float32 cpu grad>",
}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", sorted(EXPECTED_LINES))
def test_value_lines(name: str) -> None:
    assert render.value_line(EXOTIC[name]()) == EXPECTED_LINES[name].replace(" >", ">")


STATS = {
    "meta": {"note": "meta tensor: no data"},
    "fake": {"note": "fake tensor: no data"},
    "empty": {"note": "empty"},
    "sparse-coo": {"note": "sparse_coo layout: not computed"},
    "quantized": {"note": "quantized tensor: not computed"},
    "bool": {"true": "2 of 3"},
    "int": {"min": "0", "max": "9", "mean": "4.5", "std": "3.02765"},
    "0-dim": {"min": "3.5", "max": "3.5", "mean": "3.5", "std": "n/a (one element)"},
    "nan-inf": {"NaN": "1", "Inf": "1"},
    "hostile-subclass": {"NaN": "0"},
}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", sorted(STATS))
def test_statistics(name: str) -> None:
    stats = compute_statistics(EXOTIC[name]())
    assert STATS[name].items() <= stats.items(), stats


def test_huge_tensor_is_sampled() -> None:
    stats = compute_statistics(EXOTIC["huge-expanded"]())
    assert stats["max"] == "0"
    assert stats["sampled"] == f"{SAMPLE_LIMIT:,} of 100,000,000 elements (strided)"
    big = torch.ones(100_000_000, dtype=torch.uint8)  # 100 MB, contiguous
    stats = compute_statistics(big)
    assert stats["mean"] == "1" and "sampled" in stats


def test_accelerator_statistics() -> None:
    stats = compute_statistics(torch.ones(3, 4, device=accelerator_device()))
    assert stats["min"] == "1" and stats["std"] == "0"


def test_the_trace_and_findings_write_tensors_as_the_variables_view() -> None:
    a = torch.randn(4, 3, requires_grad=True)
    for tensor in (a, a @ torch.randn(3, 1), torch.randn(5), torch.tensor(1)):
        line = render.value_line(tensor)
        assert show(tensor) == line
        d = describe_tensor(tensor, "t", None)
        assert line.startswith(f"tensor<{d.shape_text} {d.dtype} {d.device}")


class Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_never_disturbs_the_tensor() -> None:
    leaf = torch.randn(50, 4, requires_grad=True)
    leaf.grad = torch.ones(50, 4)
    grad = leaf.grad
    out = (leaf * 2).sum(0)
    versions = (leaf._version, out._version, grad._version)
    packed: list[Any] = []
    with (
        warnings.catch_warnings(),
        torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t),
    ):
        warnings.simplefilter("error")  # e.g. reading .grad of a non-leaf warns
        for tensor in (leaf, out):
            render.value_line(tensor)
            render.children(render.children(tensor)[-1].value)
    assert packed == []  # no autograd graph was recorded
    assert (leaf._version, out._version, grad._version) == versions
    assert leaf.requires_grad and out.requires_grad
    assert leaf.grad is grad and out.grad_fn.__class__.__name__ == "SumBackward1"
    assert leaf.grad_fn is None


def test_statistics_only_when_asked() -> None:
    tensor = torch.randn(100, 100)
    with Recorder() as recorder:
        render.value_line(tensor)
        entries = render.children(tensor)
    assert not [op for op in recorder.ops if "amin" in op or "mean" in op], recorder.ops
    with Recorder() as recorder:
        render.children(entries[-1].value)
    assert any("amin" in op for op in recorder.ops)


def test_keeps_no_reference() -> None:
    tensor = torch.randn(10, requires_grad=True) * 3
    ref = weakref.ref(tensor)
    render.value_line(tensor)
    statistics = render.children(tensor)[-1].value
    del tensor
    gc.collect()
    assert ref() is None
    assert render.children(statistics)[0].value == "the tensor no longer exists"


def test_provenance_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    tensor = torch.zeros(2)
    assert "created at" not in [entry.name for entry in render.children(tensor)]
    monkeypatch.setattr(render, "provenance_hook", lambda t: "train.py:39 by zeros")
    entries = {entry.name: entry.value for entry in render.children(tensor)}
    assert entries["created at"] == "train.py:39 by zeros"
    monkeypatch.setattr(render, "provenance_hook", lambda t: 1 / 0)
    assert "created at" not in [entry.name for entry in render.children(tensor)]


def test_module_and_optimizer() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()).eval()
    model.register_buffer("scale", torch.ones(1))
    assert render.value_line(model) == "Sequential(16 params, cpu, float32, eval)"
    entries = {entry.name: entry.value for entry in render.children(model)}
    assert entries["parameters"] == "16 (16 trainable)"
    assert entries["mode"] == "eval"
    assert entries["0"] is model[0] and entries["scale"] is model.scale
    assert isinstance(entries["(raw)"], render.Raw)

    opt = torch.optim.Adam(
        [{"params": model[0].weight}, {"params": [model[0].bias], "lr": 0.1}], lr=0.01
    )
    assert render.value_line(opt) == "Adam(2 groups, 2 params)"
    entries = {entry.name: entry.value for entry in render.children(opt)}
    assert entries["param group 1"].startswith("1 param, lr=0.1,")
    assert entries["state"] == "0 params with state"


def test_module_children_evaluate_from_the_parent() -> None:
    """Each submodule, parameter and buffer says how to read it from its module's expression
    (a debugger's ``evaluateName``; without it no data breakpoint on ``model[0].weight``)."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
    model.add_module("odd-name", torch.nn.Identity())
    model.register_buffer("scale", torch.ones(1))
    suffixes = {entry.name: entry.evaluate for entry in render.children(model)}
    assert suffixes["0"] == "[0]" and suffixes["1"] == "[1]"
    assert suffixes["odd-name"] == "._modules['odd-name']" and suffixes["scale"] == ".scale"
    values = {entry.name: entry.value for entry in render.children(model)}
    for name in ("0", "odd-name", "scale"):
        assert eval("model" + suffixes[name]) is values[name]
    layers = torch.nn.ModuleDict({"7": torch.nn.ReLU()})
    assert {e.name: e.evaluate for e in render.children(layers)}["7"] == "._modules['7']"


def test_unrelated_objects_are_left_alone() -> None:
    assert render.value_line([1, 2]) is None
    assert render.children("text") == []


def test_plugin_imports_without_torch() -> None:
    code = (
        "import sys, pydevd_plugins.extensions.pydevd_plugin_tensor_dap as p\n"
        "assert not p.TensorStrProvider().can_provide(int, 'int')\n"
        "assert not p.TensorResolveProvider().can_provide(dict, 'dict')\n"
        "assert 'torch' not in sys.modules and 'tensor_dap.render' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_plugin_providers() -> None:
    from pydevd_plugins.extensions import pydevd_plugin_tensor_dap as plugin

    strs, resolver = plugin.TensorStrProvider(), plugin.TensorResolveProvider()
    tensor = torch.randn(2, 2)
    assert strs.can_provide(torch.Tensor, "Tensor") and resolver.can_provide(Broken, "Broken")
    assert not resolver.can_provide(int, "int") and not resolver.can_provide(render.Text, "Text")
    assert strs.get_str_in_context(tensor, "variables") == "tensor<(2, 2) float32 cpu>"
    assert strs.get_str_in_context(tensor, "repl").startswith("tensor([[")
    broken = EXOTIC["broken-subclass"]()
    assert strs.get_str_in_context(broken, "clipboard").startswith("tensor<")
    names = [name for name, _, _ in resolver.get_contents_debug_adapter_protocol(tensor)]
    assert names[0] == "shape" and names[-1] == "statistics"
