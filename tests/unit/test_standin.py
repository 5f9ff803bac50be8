"""The stand-in accelerator (tensor_dap.testing.standin) behaves like a device for user code."""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from tensor_dap.testing import accelerator_device, pick_device
from tensor_dap.testing.standin import AcceleratorTensor

SAME_DEVICE = "Expected all tensors to be on the same device, but found at least two devices"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def dev() -> torch.device:
    return accelerator_device()


def on_dev(t: torch.Tensor) -> bool:
    return t.device == torch.device("accel", 0) and not t.is_cpu


def same(acc: torch.Tensor, ref: torch.Tensor, **kw: float) -> bool:
    """Values of an accelerator tensor equal those of a CPU reference."""
    assert on_dev(acc)
    host = acc.detach().cpu()
    assert type(host) is torch.Tensor and host.device.type == "cpu"
    return host.dtype == ref.dtype and host.shape == ref.shape and torch.allclose(host, ref, **kw)


# --- setup -----------------------------------------------------------------------------------


def test_device_is_accel_and_setup_is_idempotent(dev: torch.device) -> None:
    assert dev == torch.device("accel", 0)
    assert accelerator_device() == dev
    assert dev.type == "accel" and dev.index == 0
    assert torch._C._get_privateuse1_backend_name() == "accel"


def test_pick_device(monkeypatch: pytest.MonkeyPatch, dev: torch.device) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device() == dev
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device() == torch.device("cuda")


def _run_python(code: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=240,
    )


def test_clear_error_when_privateuse1_already_renamed() -> None:
    proc = _run_python(
        """
        import torch
        torch.utils.rename_privateuse1_backend("foo")
        from tensor_dap.testing import accelerator_device
        try:
            accelerator_device()
        except RuntimeError as e:
            print("ERROR:", e)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "ERROR:" in proc.stdout and "'foo'" in proc.stdout and "renamed" in proc.stdout


def test_import_alone_does_not_rename_privateuse1() -> None:
    proc = _run_python(
        """
        import torch, tensor_dap.testing
        print(torch._C._get_privateuse1_backend_name())
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "privateuseone"


def test_a_second_copy_of_the_package_recognises_the_first_ones_tensors() -> None:
    # PrivateUse1 is set up once per process: a fresh copy of the package (modules dropped from
    # sys.modules and imported again) must name the class the first copy's kernels make.
    proc = _run_python(
        """
        import sys, torch
        import tensor_dap.testing.standin as first
        x = torch.ones(3, device=first.accelerator_device())
        for name in [m for m in sys.modules if m.startswith("tensor_dap.testing")]:
            del sys.modules[name]
        import tensor_dap.testing.standin as second
        y = torch.ones(3, device=second.accelerator_device()) * 2
        assert second is not first
        print(type(y) is second.AcceleratorTensor, isinstance(x + y, second.AcceleratorTensor))
        print(repr(x + y))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["True True", "tensor([3., 3., 3.], device='accel:0')"]


# --- creation --------------------------------------------------------------------------------


def test_factories(dev: torch.device) -> None:
    assert same(torch.zeros(3, device=dev), torch.zeros(3))
    assert same(torch.ones(2, 3, device=dev), torch.ones(2, 3))
    assert same(torch.full((2,), 7.0, device=dev), torch.full((2,), 7.0))
    assert same(torch.tensor([1.0, 2.0], device=dev), torch.tensor([1.0, 2.0]))
    assert same(torch.arange(4, device=dev), torch.arange(4))
    assert same(torch.arange(1, 7, 2, device=dev), torch.arange(1, 7, 2))
    assert same(torch.eye(3, device=dev), torch.eye(3))
    assert same(torch.linspace(0, 1, 5, device=dev), torch.linspace(0, 1, 5))
    assert same(torch.tril_indices(3, 3, device=dev), torch.tril_indices(3, 3))
    empty = torch.empty(2, 5, device=dev)
    assert on_dev(empty) and empty.shape == (2, 5)
    assert on_dev(torch.zeros_like(empty)) and on_dev(empty.new_zeros(3))
    assert torch.empty_like(empty, device="cpu").device.type == "cpu"


def test_random_factories_follow_the_cpu_generator(dev: torch.device) -> None:
    torch.manual_seed(0)
    ref = torch.randn(2, 3)
    torch.manual_seed(0)
    assert same(torch.randn(2, 3, device=dev), ref)
    torch.manual_seed(1)
    ref = torch.randint(0, 10, (5,))
    torch.manual_seed(1)
    assert same(torch.randint(0, 10, (5,), device=dev), ref)


def test_device_attributes_and_repr(dev: torch.device) -> None:
    t = torch.tensor([1.0, 2.0], device=dev)
    assert t.device == dev and t.device.type == "accel"
    assert not t.is_cpu and not t.is_cuda
    assert isinstance(t, torch.Tensor)
    assert repr(t) == "tensor([1., 2.], device='accel:0')"
    assert str(t) == repr(t)
    assert repr(torch.tensor([1, 2], dtype=torch.int32, device=dev)) == (
        "tensor([1, 2], device='accel:0', dtype=torch.int32)"
    )
    w = torch.tensor([1.0], device=dev, requires_grad=True)
    assert repr(w) == "tensor([1.], device='accel:0', requires_grad=True)"
    assert repr(w * 2) == "tensor([2.], device='accel:0', grad_fn=<MulBackward0>)"
    assert f"{torch.tensor(2.5, device=dev):.2f}" == "2.50"
    big = repr(torch.zeros(100, 100, device=dev))
    assert "..." in big and big.endswith("device='accel:0')")


# --- moving between host and device ----------------------------------------------------------


def test_moves_to_the_device(dev: torch.device) -> None:
    cpu = torch.arange(3.0)
    for moved in (cpu.to(dev), cpu.to("accel"), cpu.to(dev, non_blocking=True), cpu.accel()):
        assert type(moved) is AcceleratorTensor
        assert same(moved, cpu)
    acc = cpu.to(dev)
    assert acc.to(dev) is acc
    assert same(acc.to(torch.float64), cpu.double())


def test_copies_to_the_host_are_plain_cpu_tensors(dev: torch.device) -> None:
    acc = torch.arange(3.0, device=dev)
    for host in (acc.cpu(), acc.to("cpu"), acc.to(torch.zeros(1))):
        assert type(host) is torch.Tensor and host.device.type == "cpu"
        assert torch.equal(host, torch.arange(3.0))
    target = torch.zeros(3)
    assert target.copy_(acc) is target
    assert torch.equal(target, torch.arange(3.0))
    back = torch.zeros(3, device=dev)
    back.copy_(torch.ones(3))
    assert same(back, torch.ones(3))


def test_scalars_and_lists(dev: torch.device) -> None:
    acc = torch.tensor([1.5, 2.5], device=dev)
    assert acc.sum().item() == 4.0
    assert float(acc[0]) == 1.5
    assert int(torch.tensor(3, device=dev)) == 3
    assert acc.tolist() == [1.5, 2.5]
    assert bool((acc > 2).any())
    # a list of one-element device tensors, read one number each as CUDA does: a CPU tensor
    # (``torch.tensor([loss_a, loss_b])``, a loss rebuilt from a list)
    listed = torch.tensor([acc[0], acc.sum()])
    assert listed.device.type == "cpu" and listed.tolist() == [1.5, 4.0]
    assert torch.as_tensor([[acc[1]]]).tolist() == [[2.5]]
    assert torch.tensor([acc[0], acc[1]], device=dev).device == dev


def test_numpy_refuses_like_cuda(dev: torch.device) -> None:
    acc = torch.ones(2, device=dev)
    message = (
        "can't convert accel:0 device type tensor to numpy. "
        "Use Tensor.cpu() to copy the tensor to host memory first."
    )
    with pytest.raises(TypeError) as err:
        acc.numpy()
    assert str(err.value) == message
    with pytest.raises(TypeError, match="can't convert accel:0"):
        np.asarray(acc)
    assert np.array_equal(acc.cpu().numpy(), np.ones(2, dtype=np.float32))
    assert np.array_equal(acc.numpy(force=True), np.ones(2, dtype=np.float32))


# --- mixing devices --------------------------------------------------------------------------


def test_mixing_with_non_scalar_cpu_tensors_raises(dev: torch.device) -> None:
    acc = torch.ones(3, device=dev)
    with pytest.raises(RuntimeError, match=SAME_DEVICE) as err:
        acc + torch.ones(3)
    assert str(err.value) == f"{SAME_DEVICE}, accel:0 and cpu!"
    # The order follows the operands, as TensorIterator reports it.
    with pytest.raises(RuntimeError, match=f"{SAME_DEVICE}, cpu and accel:0!"):
        torch.ones(1) + acc
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.zeros(6).masked_scatter_(
            torch.ones(6, dtype=torch.bool, device=dev), torch.arange(6.0, device=dev)
        )
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.Tensor([0.0]).float() + acc.sum()  # the classic CPU loss accumulator
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        nn.Linear(3, 2)(acc)  # a model left on the CPU
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        acc.index_select(0, torch.tensor([0, 2]))
    # a CPU tensor indexed by device indices: PyTorch's `index` allows CPU or self's device
    with pytest.raises(RuntimeError, match=r"indices should be either on cpu or on the same "):
        torch.ones(3)[torch.tensor([0, 2], device=dev)]
    assert acc[torch.tensor([0, 2])].device == dev  # the other way round is fine


def test_cpu_scalars_and_python_numbers_are_fine(dev: torch.device) -> None:
    acc = torch.ones(3, device=dev)
    assert same(acc + torch.tensor(2.0), torch.full((3,), 3.0))
    assert same(acc * 2.0, torch.full((3,), 2.0))
    assert same(acc * torch.tensor(0.5), torch.full((3,), 0.5))
    assert same(torch.clamp(acc - 2, min=torch.tensor(0.0)), torch.zeros(3))
    # Advanced indexing accepts CPU indices, as on CUDA.
    assert same(acc[torch.tensor([0, 2])], torch.ones(2))


# --- autograd, nn, optim ---------------------------------------------------------------------


def _train(device: torch.device | str, opt_name: str, **opt_kw: object) -> tuple[list[float], dict]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    opt = getattr(torch.optim, opt_name)(model.parameters(), lr=0.01, **opt_kw)
    x = torch.randn(16, 784).to(device)
    y = torch.randint(0, 10, (16,)).to(device)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return losses, state


@pytest.mark.parametrize(
    ("opt_name", "opt_kw"),
    [("SGD", {}), ("SGD", {"foreach": True, "momentum": 0.9}), ("Adam", {}), ("AdamW", {})],
)
def test_training_matches_the_cpu(dev: torch.device, opt_name: str, opt_kw: dict) -> None:
    cpu_losses, cpu_state = _train("cpu", opt_name, **opt_kw)
    acc_losses, acc_state = _train(dev, opt_name, **opt_kw)
    assert acc_losses == pytest.approx(cpu_losses, rel=1e-5)
    for key, value in cpu_state.items():
        assert torch.allclose(acc_state[key], value, atol=1e-6), key


def test_modules_and_gradients_live_on_the_device(dev: torch.device) -> None:
    model = nn.Linear(784, 256).to(dev)
    assert isinstance(model.weight, nn.Parameter) and on_dev(model.weight)
    assert model.weight.requires_grad
    out = model(torch.randn(4, 784, device=dev))
    assert on_dev(out) and out.shape == (4, 256)
    out.sum().backward()
    assert model.weight.grad is not None and on_dev(model.weight.grad)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.zero_grad()
    assert model.weight.grad is None
    model.double()
    assert model.weight.dtype == torch.float64 and on_dev(model.weight)
    assert model(torch.randn(1, 784, device=dev, dtype=torch.float64)).dtype == torch.float64
    clone = copy.deepcopy(model)
    assert on_dev(clone.weight) and torch.equal(clone.weight.cpu(), model.weight.cpu())
    model.to("cpu")
    assert type(model.weight) is nn.Parameter and model.weight.device.type == "cpu"


def test_moving_a_model_keeps_its_parameter_objects_as_a_gpu_does(dev: torch.device) -> None:
    """An optimizer built before ``model.to(device)`` trains the model, and tied weights stay
    tied (on a GPU the move sets each parameter's data in place)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(8, 4), nn.Linear(4, 8, bias=False))
    model[0].weight = model[1].weight
    held = model[1].weight
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model.to(dev)
    assert model[0].weight is model[1].weight is held and on_dev(held)
    before = held.detach().cpu().clone()
    idx = torch.arange(8, device=dev)
    F.cross_entropy(model(idx), idx).backward()
    opt.step()
    assert not torch.equal(held.detach().cpu(), before)
    model.cpu()
    assert model[0].weight is held and held.device.type == "cpu"


def test_grad_modes(dev: torch.device) -> None:
    w = torch.randn(3, device=dev, requires_grad=True)
    with torch.no_grad():
        assert not (w * 2).requires_grad
    assert not w.detach().requires_grad and on_dev(w.detach())
    assert torch.ones(2, device=dev).requires_grad_().requires_grad
    (w * w).sum().backward()
    assert same(w.grad, 2 * w.detach().cpu())


def test_recurrent_layers_match_the_cpu(dev: torch.device) -> None:
    # nn.LSTM/GRU take fused-cell kernels on any non-CPU device; the stand-in supplies them.
    for cls in (nn.LSTM, nn.GRU):
        results = []
        for device in ("cpu", dev):
            torch.manual_seed(0)
            rnn = cls(3, 4, num_layers=2, batch_first=True).to(device)
            x = torch.randn(2, 5, 3).to(device).requires_grad_()
            out = rnn(x)[0]
            out.pow(2).sum().backward()
            results.append((out.detach().cpu(), x.grad.cpu()))
        assert torch.allclose(results[0][0], results[1][0], atol=1e-6)
        assert torch.allclose(results[0][1], results[1][1], atol=1e-6)


# --- in-place ops, views, reductions ---------------------------------------------------------


def test_in_place_ops_and_views(dev: torch.device) -> None:
    ref = torch.arange(6.0)
    acc = ref.to(dev)
    acc.add_(1)
    ref.add_(1)
    acc += 2
    ref += 2
    acc[0] = 10.0
    ref[0] = 10.0
    mask = ref > 5
    acc.masked_fill_(mask.to(dev), -1.0)
    ref.masked_fill_(mask, -1.0)
    acc.masked_scatter_(~mask.to(dev), torch.full((6,), 9.0, device=dev))
    ref.masked_scatter_(~mask, torch.full((6,), 9.0))
    assert same(acc, ref)
    assert same(acc.view(2, 3), ref.view(2, 3))
    assert same(acc.reshape(3, 2).t(), ref.reshape(3, 2).t())
    assert same(acc[1:4], ref[1:4]) and same(acc.view(2, 3)[:, 1], ref.view(2, 3)[:, 1])
    view = acc.view(2, 3)
    view[1, 1] = 42.0  # writes through to the base, as on any device
    assert acc[4].item() == 42.0
    grown = torch.ones(3, device=dev).unsqueeze_(0)
    assert grown.shape == (1, 3) and same(grown, torch.ones(1, 3))


def test_comparisons_and_reductions(dev: torch.device) -> None:
    ref = torch.tensor([[1.0, float("nan"), 3.0], [4.0, 5.0, 6.0]])
    acc = ref.to(dev)
    assert same(acc > 2, ref > 2)
    assert same(acc == acc, ref == ref)
    assert same(torch.isnan(acc), torch.isnan(ref))
    clean = torch.where(torch.isnan(acc), torch.zeros_like(acc), acc)
    clean_ref = torch.where(torch.isnan(ref), torch.zeros_like(ref), ref)
    assert same(clean, clean_ref)
    assert same(clean.amin(), clean_ref.amin()) and same(clean.amax(1), clean_ref.amax(1))
    assert same(clean.sum(), clean_ref.sum()) and same(clean.mean(0), clean_ref.mean(0))
    assert same(clean.std(), clean_ref.std())
    assert same(torch.cat([clean, clean]), torch.cat([clean_ref, clean_ref]))
    assert same(torch.stack([clean, clean]), torch.stack([clean_ref, clean_ref]))
    assert same(clean.argmax(1), clean_ref.argmax(1))


# --- autograd bookkeeping --------------------------------------------------------------------


def test_version_counters(dev: torch.device) -> None:
    a = torch.ones(3, device=dev)
    start = a._version
    a.add_(1)
    a[0] = 5.0
    assert a._version == start + 2
    d = a.detach()
    d.mul_(2)  # detach() shares the version counter (and the data)
    assert a._version == start + 3 and a[0].item() == 10.0


def test_in_place_on_a_saved_tensor_fails_at_backward(dev: torch.device) -> None:
    x = torch.randn(3, device=dev, requires_grad=True)
    h = torch.sigmoid(x)
    out = h * 2
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_aliases_share_the_version_counter(dev: torch.device) -> None:
    # tensor-dap's inplace-saved rule relies on autograd's bookkeeping, not on the storage
    # (a wrapper's own storage is a placeholder): views share their base's counter, and a saved
    # output unpacks as that output of its node.
    base = torch.randn(4, 3, device=dev)
    assert base.view(12)._base is base and base[1:]._base is base
    base[1:].add_(1)
    assert base._version == 1
    w = torch.randn(3, 2, device=dev, requires_grad=True)
    h = torch.sigmoid(base @ w)
    saved = h.grad_fn._saved_result
    assert saved.grad_fn is h.grad_fn and saved.output_nr == h.output_nr
    assert saved._version == h._version


def test_backward_without_history_fails(dev: torch.device) -> None:
    loss = (torch.ones(3, device=dev) * 2).sum()
    with pytest.raises(RuntimeError, match="does not require grad"):
        loss.backward()


# --- what a TorchFunctionMode sees -----------------------------------------------------------


class _Count(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def _seen(device: torch.device | str) -> list[list[str]]:
    """What a counting mode sees of a few user statements run on ``device``."""
    a = torch.ones(3, device=device)
    b = torch.ones(3, device=device)
    w = torch.ones(3, device=device, requires_grad=True)
    statements = [
        lambda: a + b,
        lambda: torch.zeros(3, device=device),
        lambda: (a.cpu(), a.tolist()),
        lambda: (w * 2).sum().backward(),
        lambda: print(a, file=io.StringIO()),
    ]
    seen = []
    for statement in statements:
        with _Count() as mode:
            statement()
        seen.append(mode.names)
    return seen


def test_function_mode_sees_only_user_ops(dev: torch.device) -> None:
    # The stand-in's own aten calls stay invisible: the mode sees exactly what it sees on CPU.
    on_cpu = _seen("cpu")
    assert on_cpu[0] == ["add"] and on_cpu[1] == ["zeros"]
    assert _seen(dev) == on_cpu


# --- the sample project and the clean scripts, under plain Python ----------------------------

NO_GRAD_FN = "does not require grad and does not have a grad_fn"

# What plain PyTorch does with each script (None: runs to completion). The samples are CUDA
# code: they run as on a GPU, on the simulated one (tensor_dap.simulate); the clean scripts on
# the stand-in (tensor_dap.testing.pick_device).
SAMPLE_OUTCOMES = {
    "sample_project/loss_accumulator_on_cpu.py": SAME_DEVICE,
    "sample_project/masked_scatter_on_cpu.py": SAME_DEVICE,
    "sample_project/grad_lost_detach.py": NO_GRAD_FN,
    "sample_project/grad_lost_requires_grad.py": NO_GRAD_FN,
    "sample_project/inplace_on_saved.py": "modified by an inplace operation",
    "sample_project/silent_broadcast.py": None,
    "sample_project/missing_zero_grad.py": None,
    "sample_project/leaves_device.py": None,
    "sample_project/nan_inf.py": None,
    "sample_project/clean_training.py": None,
}
CLEAN_OUTCOMES = {
    "tests/engine/clean_scripts/train_with_validation.py": None,
    "tests/engine/clean_scripts/grad_accumulation.py": None,
    "tests/engine/clean_scripts/dqn_target.py": None,
    "tests/engine/clean_scripts/gan_step.py": None,
    "tests/engine/clean_scripts/cpu_scalars.py": None,
}


def _outcomes(paths: list[str], setup: str = "") -> dict[str, list]:
    """Each script's error (or None) and output, in one interpreter for all (torch imports
    once): a few seconds."""
    proc = _run_python(
        f"""
        import contextlib, io, json, runpy, sys
        {setup}
        results = {{}}
        for path in {sorted(paths)!r}:
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    runpy.run_path(path, run_name="__main__")
                results[path] = [None, out.getvalue()]
            except Exception as e:
                results[path] = [type(e).__name__ + ": " + str(e), out.getvalue()]
        print(json.dumps(results))
        """,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _assert_outcomes(results: dict[str, list], expected_outcomes: dict) -> None:
    for path, expected in expected_outcomes.items():
        error, output = results[path]
        if expected is None:
            assert error is None, f"{path}: {error}"
        else:
            assert error is not None and expected in error, f"{path}: {error}"


def test_samples_behave_on_a_cuda_device_as_their_docstrings_say() -> None:
    setup = "import tensor_dap.simulate; tensor_dap.simulate.start('cuda')"
    results = _outcomes(list(SAMPLE_OUTCOMES), setup)
    _assert_outcomes(results, SAMPLE_OUTCOMES)
    assert "cpu and cuda:0" in results["sample_project/masked_scatter_on_cpu.py"][0]
    assert "final loss 1.2500" in results["sample_project/silent_broadcast.py"][1]
    assert "loss: nan" in results["sample_project/nan_inf.py"][1]


def test_clean_scripts_run_to_the_end() -> None:
    _assert_outcomes(_outcomes(list(CLEAN_OUTCOMES)), CLEAN_OUTCOMES)


BACKWARD_THEN_EXIT = """
import torch
from tensor_dap.testing import accelerator_device

x = torch.randn(8, 8, device=accelerator_device(), requires_grad=True)
(x @ x).sum().backward()
print(x.grad.shape)
"""


def test_a_program_that_ran_backward_exits_cleanly(tmp_path) -> None:  # noqa: ANN001
    """Backward on the stand-in used to run on autograd's device thread, and about one exit
    in two under load aborted ("terminate called without an active exception")."""
    import subprocess
    import sys

    script = tmp_path / "backward.py"
    script.write_text(BACKWARD_THEN_EXIT)
    runs = [
        subprocess.Popen(
            [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(6)
    ]
    results = [(run.wait(timeout=120), run.stderr.read().decode()) for run in runs]
    assert all(code == 0 for code, _ in results), results
