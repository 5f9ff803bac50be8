"""The shortcut past torch's Python dispatch: ``F.relu(x)``, ``F.mse_loss(...)``,
``loss.backward()`` reach the watch without ``torch.overrides.handle_torch_function``'s Python,
yet every rule, subclass and user's mode sees them as before, and torch's function is given
back when the last watch stops."""

from __future__ import annotations

import contextlib
import threading

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import tensor_dap
from tensor_dap.agent import dispatch_shortcut, native
from tensor_dap.testing import accelerator_device

pytestmark = pytest.mark.skipif(native.fastpath is None, reason="the C fast path is not built")

_ORIGINAL = torch.overrides.handle_torch_function


class Passing(TorchFunctionMode):
    """A user's mode that runs every function as it is."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        return func(*args, **(kwargs or {}))


def _holders() -> dict[str, object]:
    return {
        name: vars(__import__(name, fromlist=["_"]))["handle_torch_function"]
        for name in dispatch_shortcut.MODULES
    }


@pytest.fixture
def python_dispatches(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The public functions that went through torch's Python dispatch (``_get_overloaded_args``
    is the first thing ``handle_torch_function`` calls)."""
    seen: list[object] = []
    collect = torch.overrides._get_overloaded_args

    def spy(relevant_args, get_type_fn=None):  # noqa: ANN001, ANN202
        seen.append(relevant_args)
        return collect(relevant_args, get_type_fn)

    monkeypatch.setattr(torch.overrides, "_get_overloaded_args", spy)
    return seen


def test_a_training_steps_python_functions_skip_torchs_dispatch(python_dispatches) -> None:  # noqa: ANN001
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    with tensor_dap.watch() as watch:
        assert set(_holders().values()) == {dispatch_shortcut._installed[F]}
        loss = F.cross_entropy(model(x), y)  # nn.ReLU calls F.relu
        loss.backward()
    assert python_dispatches == []
    assert model[0].weight.grad is not None and watch.findings == []
    assert set(_holders().values()) == {_ORIGINAL}
    # and without a watch's mode innermost, torch's own runs (here: a user's mode alone)
    with Passing():
        F.relu(x)
    assert len(python_dispatches) == 1


def test_nested_watches_keep_it_until_the_last_stops() -> None:
    with tensor_dap.watch():
        with tensor_dap.watch(rules=["broadcast"]):
            pass
        assert F.handle_torch_function is not _ORIGINAL
    assert set(_holders().values()) == {_ORIGINAL}


def test_a_finding_through_it_names_the_users_line_and_variables() -> None:
    device = accelerator_device()
    pred = torch.ones(3, device=device, requires_grad=True)
    target = torch.zeros(3)
    with tensor_dap.watch(rules=["device-mismatch"]) as watch, contextlib.suppress(RuntimeError):
        F.mse_loss(pred, target)
    [finding] = watch.findings
    here = test_a_finding_through_it_names_the_users_line_and_variables.__code__
    assert finding.line == here.co_firstlineno + 5
    assert "F.mse_loss(pred, target)" in finding.message and "target" in finding.message


def test_provenance_names_the_function_and_the_users_line() -> None:
    x = torch.randn(4)
    with tensor_dap.watch(rules=["broadcast"]) as watch:
        out = F.relu(x)
        prov = watch.provenance.lookup(out)
    here = test_provenance_names_the_function_and_the_users_line.__code__
    assert prov is not None and (prov.line, prov.op) == (here.co_firstlineno + 3, "relu")


def test_loss_backward_is_judged_at_its_line() -> None:
    w = torch.ones(3, requires_grad=True)
    with tensor_dap.watch(rules=["grad-lost"]) as watch:
        loss = torch.tensor((w * 2).sum().item(), requires_grad=True)
        loss.backward()
    [finding] = watch.findings
    here = test_loss_backward_is_judged_at_its_line.__code__
    assert finding.rule == "grad-lost" and finding.line == here.co_firstlineno + 4


def test_a_subclass_and_a_users_mode_still_get_the_function() -> None:
    calls: list[object] = []

    class Logged(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
            calls.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})

    class Recording(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            calls.append(("mode", func))
            return func(*args, **(kwargs or {}))

    logged = torch.ones(2).as_subclass(Logged)
    with tensor_dap.watch():
        out = F.relu(logged)
        with Recording():
            F.gelu(torch.ones(2))
    assert type(out) is Logged and F.relu in calls
    assert ("mode", F.gelu) in calls


def test_parameters_numbers_and_keywords_pass_through() -> None:
    weight = torch.nn.Parameter(torch.tensor([-1.0, 2.0]))
    with tensor_dap.watch():
        relu = F.relu(weight)
        dropped = F.dropout(weight, p=0.5, training=False)
        leaky = F.leaky_relu(weight, negative_slope=0.5)
        first, second = torch.split(torch.arange(4.0), 2)
    assert relu.tolist() == [0.0, 2.0] and dropped.tolist() == [-1.0, 2.0]
    assert leaky.tolist() == [-0.5, 2.0] and second.tolist() == [2.0, 3.0]


def test_errors_come_through_unchanged() -> None:
    def wrong() -> object:
        return F.cross_entropy(torch.randn(4, 3), torch.tensor([0, 1]))

    with pytest.raises(Exception) as plain:
        wrong()
    with tensor_dap.watch() as watch:
        with pytest.raises(Exception) as watched:
            wrong()
        assert torch._C._get_function_stack_at(0) is watch._mode
    assert type(watched.value) is type(plain.value) and str(watched.value) == str(plain.value)
    assert torch._C._len_torch_function_stack() == 0


def test_a_function_returning_not_implemented_gets_torchs_error() -> None:
    """The mode's NotImplemented leads where torch's own function leads: the tensors' turn,
    then its TypeError."""

    def declines(tensor: torch.Tensor, dispatch: bool = True) -> object:
        if dispatch and torch.overrides.has_torch_function_unary(tensor):
            return F.handle_torch_function(declines, (tensor,), tensor, dispatch=False)
        return NotImplemented

    with Passing(), pytest.raises(TypeError) as plain:
        declines(torch.ones(1))
    with tensor_dap.watch(), pytest.raises(TypeError) as watched:
        declines(torch.ones(1))
    assert str(plain.value).split(" nor in mode")[0] == str(watched.value).split(" nor in mode")[0]
    assert "no implementation found for" in str(watched.value)


def test_another_thread_without_a_watch_runs_torchs_own() -> None:
    results = []
    start, done = threading.Event(), threading.Event()

    def work() -> None:
        start.wait(30)
        with Passing():
            results.append(F.relu(torch.tensor([-1.0, 1.0])))
        done.set()

    thread = threading.Thread(target=work)
    thread.start()
    with tensor_dap.watch() as watch:
        start.set()
        assert done.wait(30)
    thread.join()
    assert results[0].tolist() == [0.0, 1.0] and watch.findings == []


def test_profiler_marks_of_a_step_pass_through_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``optimizer.step()`` opens and closes a ``record_function`` range (torch.ops' profiler
    ops, the closing one a ``TorchBindOpOverload``): under the watch each is run once, as
    without it (torch's Python ``__call__`` is not run again from the mode), and the profiler
    still records the range."""
    checks: list[object] = []
    must_dispatch = torch._ops._must_dispatch_in_python

    def spy(args, kwargs):  # noqa: ANN001, ANN202
        checks.append(args)
        return must_dispatch(args, kwargs)

    monkeypatch.setattr(torch._ops, "_must_dispatch_in_python", spy)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(2, 3)).sum().backward()
    optimizer.step()
    plain = len(checks)
    checks.clear()
    with tensor_dap.watch(), torch.profiler.profile() as profile:
        optimizer.step()
    assert plain >= 1 and len(checks) == plain
    assert any("Optimizer.step#SGD.step" in event.key for event in profile.key_averages())


@pytest.mark.parametrize(
    "operation",
    [lambda t: t // None, lambda t: t**None, lambda t: None - t, lambda t: None @ t],
    ids=["floordiv", "pow", "rsub", "rmatmul"],
)
def test_an_operator_torch_declines_inside_tensors_torch_function(operation) -> None:  # noqa: ANN001
    """``t // None``: Tensor's Python operator hands itself over, answers NotImplemented, and
    ``Tensor.__torch_function__`` calls it again with subclasses' torch functions off, where
    torch hands the mode no types and then raises: the same TypeError under the watch."""
    t = torch.ones(2)
    with pytest.raises(TypeError) as plain:
        operation(t)
    with tensor_dap.watch() as watch:
        with pytest.raises(TypeError) as watched:
            operation(t)
        assert torch._C._get_function_stack_at(0) is watch._mode
    assert str(watched.value) == str(plain.value)


def test_a_traceback_leaves_out_the_frame_that_handed_over(capsys) -> None:  # noqa: ANN001
    """``F.max_pool2d`` hands over another function than itself (its ``boolean_dispatch``):
    the frame making the hand-over is not shown, as torch's ``handle_torch_function`` is not."""
    from tensor_dap.runner import print_user_traceback

    with tensor_dap.watch():
        try:
            F.max_pool2d(torch.randn(1, 1, 2, 2), 5)
        except RuntimeError as error:
            caught = error
    print_user_traceback(caught, hook=False)
    shown = capsys.readouterr().err
    assert "max_pool2d" in shown and "handle_torch_function" not in shown
    assert F.handle_torch_function is _ORIGINAL
