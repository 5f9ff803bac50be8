"""Optimizers run their own code outside the watch (``tensor_dap.agent.optimizers``): their
ops cost no dispatch, the watch comes back whatever happens, and the rules still hear what
``step()`` and ``zero_grad()`` did."""

from __future__ import annotations

import importlib
import threading

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

import tensor_dap

pytestmark = pytest.mark.usefixtures("engine_path")

_stack = torch._C._len_torch_function_stack


def _model_and_optimizer(**options: object) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, **options)


class _FailingSGD(torch.optim.SGD):
    def step(self, closure=None):  # noqa: ANN001
        raise RuntimeError("step failed")


def _good_and_failing_optimizers() -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
    """Two optimizers of one parameter that has a gradient: one steps, one raises."""
    param = nn.Parameter(torch.ones(3))
    param.grad = torch.ones(3)
    return torch.optim.SGD([param], lr=0.1), _FailingSGD([param], lr=0.1)


def _code_of(function: object) -> object:
    return getattr(function, "__wrapped__", function).__code__


def _most_hits(watch: tensor_dap.Watch, code: object) -> int:
    """The most ops any line of ``code`` ran through the watch."""
    lines = range(code.co_firstlineno, code.co_firstlineno + 200)
    return max(watch.line_hits(code, line) for line in lines)


def test_zero_grad_and_step_run_no_op_through_the_watch() -> None:
    model, optimizer = _model_and_optimizer(momentum=0.9)
    x = torch.randn(4, 3)
    with tensor_dap.watch() as watch:
        for _ in range(3):
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
    zero_grad = torch.optim.Optimizer.zero_grad
    sgd_step = importlib.import_module("torch.optim.sgd")._single_tensor_sgd
    assert _most_hits(watch, _code_of(zero_grad)) == 0
    assert _most_hits(watch, _code_of(sgd_step)) == 0
    # while the user's lines are watched as ever
    assert _most_hits(watch, _code_of(test_zero_grad_and_step_run_no_op_through_the_watch)) == 3


def test_zero_grad_stays_wrapped_after_the_watch_and_release_gives_it_back() -> None:
    """Like the C operator shadows: with no watch running the wrapper is the original."""
    from tensor_dap.agent import optimizers

    assert optimizers.release()
    original = torch.optim.Optimizer.__dict__["zero_grad"]
    model, optimizer = _model_and_optimizer()
    with tensor_dap.watch():
        wrapped = torch.optim.Optimizer.__dict__["zero_grad"]
        assert wrapped is not original
        assert wrapped.__name__ == "zero_grad" and wrapped.__doc__ == original.__doc__
        with tensor_dap.watch():
            assert torch.optim.Optimizer.__dict__["zero_grad"] is wrapped
        assert not optimizers.release()  # a watch runs: nothing is given back
    assert torch.optim.Optimizer.__dict__["zero_grad"] is wrapped
    model(torch.randn(4, 3)).sum().backward()
    optimizer.zero_grad(set_to_none=False)  # acts as the original with no watch
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    assert optimizer.zero_grad() is None and all(p.grad is None for p in model.parameters())
    assert optimizers.release()
    assert torch.optim.Optimizer.__dict__["zero_grad"] is original


def test_a_zero_grad_that_raises_leaves_the_watch_in_place() -> None:
    _, optimizer = _model_and_optimizer()
    optimizer.param_groups = None  # zero_grad's loop raises TypeError
    with tensor_dap.watch(rules=["broadcast"]) as watch:
        with pytest.raises(TypeError):
            optimizer.zero_grad()
        assert _stack() == 1
        _ = torch.ones(4) - torch.ones(4, 1)
    assert _stack() == 0
    assert [f.rule for f in watch.findings] == ["broadcast"]


def test_optimizer_steps_run_unwatched_and_the_watch_comes_back() -> None:
    good, bad = _good_and_failing_optimizers()
    with tensor_dap.watch(rules=["broadcast"]) as watch:
        good.step()
        assert _stack() == 1
        with pytest.raises(RuntimeError, match="step failed"):
            bad.step()
        good.step()  # the next step puts the watch back first
        assert _stack() == 1
        with pytest.raises(RuntimeError, match="step failed"):
            bad.step()
        good.zero_grad()  # and so does zero_grad
        assert _stack() == 1
        _ = torch.ones(4) - torch.ones(4, 1)
    assert _stack() == 0
    assert [f.rule for f in watch.findings] == ["broadcast"]


def test_a_step_that_raises_last_is_mended_by_the_end_of_the_watch() -> None:
    param = nn.Parameter(torch.ones(3))
    with tensor_dap.watch(rules=["broadcast"]), pytest.raises(RuntimeError):
        _FailingSGD([param], lr=0.1).step()
    assert _stack() == 0
    with tensor_dap.watch(rules=["broadcast"]) as watch:  # a clean start after it
        _ = torch.ones(4) - torch.ones(4, 1)
    assert _stack() == 0
    assert [f.rule for f in watch.findings] == ["broadcast"]


def test_the_watch_goes_back_under_a_mode_the_program_entered_after_a_failed_step() -> None:
    """A caught failed step leaves the watch off; the mode put back by the next zero_grad
    goes where it was, so the user's own ``with`` exit pops the user's mode."""

    class Users(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            return func(*args, **(kwargs or {}))

    good, bad = _good_and_failing_optimizers()
    with tensor_dap.watch(rules=["broadcast"]) as watch:
        with pytest.raises(RuntimeError, match="step failed"):
            bad.step()
        users = Users()
        with users:
            good.zero_grad()
            assert _stack() == 2 and torch._C._get_function_stack_at(1) is users
        assert _stack() == 1 and torch._C._get_function_stack_at(0) is not users
        _ = torch.ones(4) - torch.ones(4, 1)
    assert _stack() == 0
    assert [f.rule for f in watch.findings] == ["broadcast"]


def test_rules_switched_while_an_op_is_planned_leave_no_wrong_plan() -> None:
    """The debugger's thread may switch the rules (set_enabled) while the program's thread
    plans an op; watches share plans, so a plan made for the old rules must not be filed
    under the new ones."""
    from tensor_dap.agent import plans

    plans.SHARED_PLANS.clear()  # (so that `a - b` is planned here, not found planned)
    watch = tensor_dap.watch(rules=["nan-inf"])

    class SwitchingMidPlan(dict):
        """The rule modules, read by the planner: the first read switches the rules, as if
        the other thread did it right then."""

        switched = False

        def __getitem__(self, rule_id: str) -> object:
            if not SwitchingMidPlan.switched:
                SwitchingMidPlan.switched = True
                watch.set_enabled(["nan-inf", "broadcast"])
            return super().__getitem__(rule_id)

    a, b = torch.ones(4), torch.ones(4, 1)
    with watch:
        watch._modules = SwitchingMidPlan(watch._modules)
        _ = a - b  # planned for nan-inf alone
    assert SwitchingMidPlan.switched
    with tensor_dap.watch(rules=["nan-inf", "broadcast"]) as later:
        _ = a - b
    assert [f.rule for f in later.findings] == ["broadcast"]


def test_a_step_with_a_closure_watches_the_closure() -> None:
    """LBFGS runs the user's forward and backward inside ``step(closure)``: still watched."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.LBFGS(model.parameters(), max_iter=2)
    x, y = torch.randn(4, 3), torch.randn(4)

    stacks = []

    def closure() -> torch.Tensor:
        stacks.append(_stack())
        optimizer.zero_grad()
        loss = ((y - model(x)) ** 2).mean()  # (4,) - (4, 1): the silent broadcast
        loss.backward()
        return loss

    with tensor_dap.watch(rules=["broadcast"]) as watch:
        optimizer.step(closure)
        assert _stack() == 1
    assert stacks and set(stacks) == {1}  # the watch mode is there for every call
    assert {f.rule for f in watch.findings} == {"broadcast"}
    assert {f.line for f in watch.findings} == {closure.__code__.co_firstlineno + 3}


def test_zero_grad_keeping_tensors_is_seen_by_missing_zero_grad() -> None:
    """``zero_grad(set_to_none=False)`` zeroes in place, unwatched: the rule is told."""
    model, optimizer = _model_and_optimizer()
    x = torch.randn(4, 3)
    with tensor_dap.watch(rules=["missing-zero-grad"]) as zeroed:
        for _ in range(3):
            optimizer.zero_grad(set_to_none=False)
            model(x).sum().backward()
            optimizer.step()
    assert zeroed.findings == []
    with tensor_dap.watch(rules=["missing-zero-grad"]) as forgotten:
        for _ in range(3):
            model(x).sum().backward()
            optimizer.step()
    assert [f.rule for f in forgotten.findings] == ["missing-zero-grad"]
    assert "2 of 2 parameters" in forgotten.findings[0].message


def test_a_step_in_another_thread_keeps_each_threads_watch() -> None:
    model, optimizer = _model_and_optimizer()
    seen: dict[str, int] = {}

    def train() -> None:
        optimizer.zero_grad()
        model(torch.randn(4, 3)).sum().backward()
        optimizer.step()
        seen["thread"] = _stack()

    with tensor_dap.watch(rules=["broadcast"]):
        thread = threading.Thread(target=train)
        thread.start()
        thread.join()
        seen["main"] = _stack()
    assert seen == {"thread": 1, "main": 1}


def test_compiled_training_step_under_the_watch() -> None:
    model, optimizer = _model_and_optimizer()
    x = torch.randn(4, 3)

    @torch.compile(backend="eager")
    def step() -> torch.Tensor:
        optimizer.zero_grad()
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        return loss

    expected_model, expected_optimizer = _model_and_optimizer()
    with tensor_dap.watch():
        losses = [step().item() for _ in range(3)]
    for _ in range(3):
        expected_optimizer.zero_grad()
        expected = expected_model(x).sum()
        expected.backward()
        expected_optimizer.step()
    assert losses[-1] == pytest.approx(expected.item())
    assert _stack() == 0
