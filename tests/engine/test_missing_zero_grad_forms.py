"""``missing-zero-grad`` counts only writes that really reset a gradient: gradient clipping,
unscaling and hand-written scaling modify ``.grad`` in place and must not hide a forgotten
``zero_grad()`` — while every real way of zeroing keeps the rule quiet."""

from __future__ import annotations

import inspect
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.testing import accelerator_device

DEVICES = ["cpu", "accel"]


def _device(name: str) -> torch.device:
    return accelerator_device() if name == "accel" else torch.device("cpu")


def train(
    device: torch.device,
    before_backward: Callable[[nn.Module, torch.optim.Optimizer], None],
    after_backward: Callable[[nn.Module], None],
    steps: int = 4,
) -> list[tuple[str, int]]:
    """A small regression loop; ``zero_grad`` is called once, before the loop, as in the
    bug; the hooks add what the program does around ``backward()``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 4, device=device), torch.randn(32, 1, device=device)
    with tensor_dap.watch(rules=["missing-zero-grad"]) as watch:
        optimizer.zero_grad()
        for _ in range(steps):
            before_backward(model, optimizer)
            F.mse_loss(model(x), y).backward()
            after_backward(model)
            optimizer.step()
    return [(f.rule, f.line) for f in watch.findings]


def nothing(*_: object) -> None:
    pass


def clip_norm(model: nn.Module) -> None:
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)


def clip_norm_foreach(model: nn.Module) -> None:
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25, foreach=True)


def clip_value(model: nn.Module) -> None:
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)


def halve(model: nn.Module) -> None:
    for param in model.parameters():
        param.grad.mul_(0.5)


STEP_LINE = next(
    number
    for number, text in enumerate(
        inspect.getsource(train).splitlines(), train.__code__.co_firstlineno
    )
    if "optimizer.step()" in text
)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("modify", [clip_norm, clip_norm_foreach, clip_value, halve])
def test_modifying_gradients_in_place_does_not_hide_a_forgotten_zero_grad(
    modify: Callable[[nn.Module], None], device: str
) -> None:
    assert train(_device(device), nothing, modify) == [("missing-zero-grad", STEP_LINE)]


def zero_by_hand(model: nn.Module, _: object) -> None:
    for param in model.parameters():
        if param.grad is not None:
            param.grad.zero_()


def zero_data_by_hand(model: nn.Module, _: object) -> None:
    """Older tutorials: ``p.grad.data.zero_()`` (another tensor object, the same data)."""
    for param in model.parameters():
        if param.grad is not None:
            param.grad.data.zero_()


def fill_zero(model: nn.Module, _: object) -> None:
    for param in model.parameters():
        if param.grad is not None:
            param.grad.fill_(0)


def multiply_by_zero(model: nn.Module, _: object) -> None:
    for param in model.parameters():
        if param.grad is not None:
            param.grad.mul_(0.0)


def zero_grad_keeping_tensors(_: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad(set_to_none=False)


def module_zero_grad(model: nn.Module, _: object) -> None:
    model.zero_grad()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "zero",
    [
        zero_by_hand,
        zero_data_by_hand,
        fill_zero,
        multiply_by_zero,
        zero_grad_keeping_tensors,
        module_zero_grad,
    ],
)
@pytest.mark.parametrize("modify", [nothing, clip_norm])
def test_every_real_zeroing_keeps_the_rule_quiet(
    zero: Callable[..., None], modify: Callable[[nn.Module], None], device: str
) -> None:
    assert train(_device(device), zero, modify) == []


class Trainer:
    """Keeps its optimizer as ``self.opt`` (as forward-forward's layers do)."""

    def __init__(self) -> None:
        self.model = nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def step(self, x: torch.Tensor) -> None:
        self.model(x).pow(2).mean().backward()
        self.opt.step()


def test_the_fix_names_the_optimizer_as_the_code_does() -> None:
    x = torch.randn(8, 4)
    with tensor_dap.watch(rules=["missing-zero-grad"]) as watch:
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            model(x).pow(2).mean().backward()
            opt.step()
        trainer = Trainer()
        for _ in range(3):
            trainer.step(x)
    first, second = (f.message for f in watch.findings)
    assert "Call opt.zero_grad() before loss.backward()" in first
    assert "Call self.opt.zero_grad() before loss.backward()" in second


def test_an_accumulation_whose_step_was_left_out_of_its_condition_is_told_so() -> None:
    """``zero_grad()`` every ``ACCUM`` batches under an ``if``, ``step()`` at every one: the
    fix keeps the accumulation (``step()`` under the same condition), not a zero_grad() in
    each step, which would undo it."""
    x = torch.randn(8, 4)
    accum = 4
    with tensor_dap.watch(rules=["missing-zero-grad"]) as watch:
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        opt.zero_grad()
        for i in range(8):
            (model(x).pow(2).mean() / accum).backward()
            opt.step()
            if (i + 1) % accum == 0:
                opt.zero_grad()
    here = test_an_accumulation_whose_step_was_left_out_of_its_condition_is_told_so
    lines, first = inspect.getsourcelines(here)
    zero = first + next(i for i, t in enumerate(lines) if t == " " * 16 + "opt.zero_grad()\n")
    (message,) = {f.message for f in watch.findings}
    assert (
        f"opt.zero_grad() at test_missing_zero_grad_forms.py:{zero} runs under a condition, "
        "this step() at every iteration: to accumulate gradients, call opt.step() under the "
        "same condition, just before that zero_grad(); otherwise call opt.zero_grad() before "
        "loss.backward() in each step." in message
    )


def test_a_zero_grad_once_an_epoch_is_told_to_move_into_the_batch_loop() -> None:
    x = torch.randn(8, 4)
    with tensor_dap.watch(rules=["missing-zero-grad"]) as watch:
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _epoch in range(2):
            opt.zero_grad()
            for _batch in range(3):
                model(x).pow(2).mean().backward()
                opt.step()
    here = test_a_zero_grad_once_an_epoch_is_told_to_move_into_the_batch_loop
    lines, first = inspect.getsourcelines(here)
    zero = first + next(i for i, t in enumerate(lines) if t.strip() == "opt.zero_grad()")
    (message,) = {f.message for f in watch.findings}
    assert message.endswith(
        f"opt.zero_grad() at test_missing_zero_grad_forms.py:{zero} runs outside the loop that "
        "calls step() (once before it, or once an epoch): move it into that loop, i.e. call "
        "opt.zero_grad() before loss.backward() in each step."
    )


class AccumulatingTrainer:
    """A trainer whose ``_optimizer_step()`` helper clips and steps, called every ``accum``
    batches by its epoch's loop; its ``zero_grad()`` runs once, before that loop."""

    def __init__(self, accum: int) -> None:
        self.model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.accum = accum

    def _optimizer_step(self) -> None:
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()

    def train_epoch(self, batches: list[torch.Tensor]) -> None:
        self.optimizer.zero_grad()
        for i, x in enumerate(batches):
            (self.model(x).pow(2).mean() / self.accum).backward()
            if (i + 1) % self.accum == 0:
                self._optimizer_step()


def test_an_accumulating_step_in_a_helper_is_told_to_zero_after_it() -> None:
    """Gradient accumulation whose ``zero_grad()`` runs once before the epoch's loop: the fix
    is a ``zero_grad()`` right after each ``step()``, under its condition (not before each
    backward, which would undo the accumulation); the parameters are named as the helper's
    ``self`` holds them."""
    with tensor_dap.watch(rules=["missing-zero-grad"]) as watch:
        trainer = AccumulatingTrainer(accum=2)
        trainer.train_epoch([torch.randn(8, 4) for _ in range(8)])
    lines, first = inspect.getsourcelines(AccumulatingTrainer)
    zero = first + next(i for i, t in enumerate(lines) if "self.optimizer.zero_grad()" in t)
    step = first + next(i for i, t in enumerate(lines) if "self.optimizer.step()" in t)
    assert {f.line for f in watch.findings} == {step}
    (message,) = {f.message for f in watch.findings}
    assert "(self.model.0.weight (3, 4), self.model.0.bias (3,), " in message
    assert message.endswith(
        "step() runs under a condition in its loop (gradient accumulation) "
        f"(self.optimizer.zero_grad() at test_missing_zero_grad_forms.py:{zero} runs once, "
        "before that loop): call self.optimizer.zero_grad() right after each step(), under "
        "that condition."
    )


def test_a_models_zero_grad_before_the_loop_is_named_as_written() -> None:
    """The DCGAN tutorial zeroes the discriminator with ``netD.zero_grad()``; written once
    before the loop, it is named as written and told to move into the loop."""
    with tensor_dap.watch(rules=["missing-zero-grad"]) as watch:
        netD = nn.Sequential(nn.Linear(2, 4), nn.LeakyReLU(0.2), nn.Linear(4, 1))
        optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4)
        netD.zero_grad()
        for _ in range(4):
            netD(torch.randn(8, 2)).mean().backward()
            optimizerD.step()
    here = test_a_models_zero_grad_before_the_loop_is_named_as_written
    zero = _line_of_source(here, "netD.zero_grad()")
    (message,) = {f.message for f in watch.findings}
    assert (
        f"netD.zero_grad() at test_missing_zero_grad_forms.py:{zero} runs outside the loop that "
        "calls step() (once before it, or once an epoch): move it into that loop, i.e. call "
        "optimizerD.zero_grad() before loss.backward() in each step." in message
    )


def _line_of_source(function, text: str) -> int:  # noqa: ANN001
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, t in enumerate(lines) if t.strip() == text)


def test_a_step_skipped_on_a_bad_batch_is_no_accumulation() -> None:
    """``if math.isfinite(loss.item()): opt.step()`` guards against a bad batch, whose
    gradients must then be zeroed: the fix stays a zero_grad() in each step (an accumulating
    step's "zero right after step(), under the condition" would keep the bad gradients)."""
    import math

    with tensor_dap.watch(rules=["missing-zero-grad"]) as watch:
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        opt.zero_grad()
        for _ in range(6):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            if math.isfinite(loss.item()):
                opt.step()
    (message,) = {f.message for f in watch.findings}
    assert "gradient accumulation" not in message
    assert message.endswith("call opt.zero_grad() before loss.backward() in each step.")


def _findings(program: Callable[[], None]) -> list[tuple[int, str]]:
    with tensor_dap.watch(rules=["missing-zero-grad"]) as watch:
        program()
    return [(f.line, f.message) for f in watch.findings]


def _line_in(program: Callable[[], None], text: str) -> int:
    lines, first = inspect.getsourcelines(program)
    return next(first + i for i, line in enumerate(lines) if text in line)


def style_transfer_lbfgs(zero_in_closure: bool) -> None:
    """PyTorch's neural style transfer tutorial's loop: LBFGS optimises the input image; its
    closure must zero the image's gradient, LBFGS calling it several times per step."""
    torch.manual_seed(0)
    features = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3)).requires_grad_(
        False
    )
    content = torch.rand(1, 3, 12, 12)
    target = features(content)
    image = content.clone().requires_grad_(True)
    optimizer = torch.optim.LBFGS([image], max_iter=4)
    for _ in range(3):

        def closure() -> torch.Tensor:
            with torch.no_grad():
                image.clamp_(0, 1)
            if zero_in_closure:
                optimizer.zero_grad()
            loss = F.mse_loss(features(image), target)
            loss.backward()
            return loss

        optimizer.step(closure)


def closure_step_sgd(zero: str) -> None:
    """``step(closure)`` of an optimizer calling it once: ``zero`` says where zero_grad() is."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 3), torch.randn(16, 1)
    for _ in range(4):

        def closure() -> torch.Tensor:
            if zero == "in the closure":
                opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            return loss

        if zero == "before the step":
            opt.zero_grad()
        opt.step(closure)


def test_an_lbfgs_closure_without_zero_grad_is_told_to_zero_in_it() -> None:
    found = set(_findings(lambda: style_transfer_lbfgs(False)))
    assert {line for line, _ in found} == {
        _line_in(style_transfer_lbfgs, "optimizer.step(closure)")
    }
    ((_, message),) = found
    assert message == (
        "`optimizer.step(closure)`: 1 of 1 parameters get gradients that still hold "
        "contributions from earlier backward() calls (image (1, 3, 12, 12)): the closure's "
        "backward() adds to them and zero_grad() is not called in it (LBFGS calls it up to "
        "max_iter times per step). Call optimizer.zero_grad() at the start of the closure."
    )


def test_a_closure_step_without_zero_grad_is_found_from_its_second_step() -> None:
    found = _findings(lambda: closure_step_sgd("nowhere"))
    assert {line for line, _ in found} == {_line_in(closure_step_sgd, "opt.step(closure)")}
    assert found[0][1].endswith("Call opt.zero_grad() at the start of the closure.")


@pytest.mark.parametrize("zero", ["in the closure", "before the step"])
def test_closures_zeroed_in_them_or_before_a_single_call_step_stay_quiet(zero: str) -> None:
    assert _findings(lambda: style_transfer_lbfgs(True)) == []
    assert _findings(lambda: closure_step_sgd(zero)) == []


def test_a_models_zero_grad_that_misses_a_parameter_beside_the_model_is_named() -> None:
    """Uncertainty weighting of two tasks (a helper's program): ``log_vars`` is a Parameter
    beside the model, in the optimizer; the loop zeroes with ``model.zero_grad()``, which runs
    at every step but leaves log_vars' gradient adding up. The message names that call and what
    it misses, not "zero_grad() was not called"."""
    with tensor_dap.watch(rules=["missing-zero-grad"]) as watch:
        model = nn.Linear(3, 2)
        log_vars = nn.Parameter(torch.zeros(2))
        optimizer = torch.optim.Adam([*model.parameters(), log_vars], lr=5e-3)
        for _ in range(4):
            model.zero_grad()
            losses = model(torch.randn(8, 3)).pow(2).mean(0)
            (torch.exp(-log_vars) * losses + log_vars).sum().backward()
            optimizer.step()
    here = test_a_models_zero_grad_that_misses_a_parameter_beside_the_model_is_named
    zero = _line_of_source(here, "model.zero_grad()")
    (message,) = {f.message for f in watch.findings}
    assert "1 of 3 parameters get gradients that still hold contributions" in message
    assert "(log_vars (2,))" in message
    assert message.endswith(
        f"model.zero_grad() at test_missing_zero_grad_forms.py:{zero} zeroes model's parameters "
        "only, and these are not among them. Call optimizer.zero_grad() there instead: it zeroes "
        "every parameter optimizer steps."
    ), message


def test_the_fix_names_the_backward_call_as_the_program_writes_it() -> None:
    """A sampler's energy ``U.backward()`` with zero_grad() forgotten (helper 70's SGLD): the
    fix says "before U.backward()", the program's own call."""
    with tensor_dap.watch(rules=["missing-zero-grad", "grad-lost"]) as watch:
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        for _ in range(3):
            U = model(torch.randn(8, 3)).pow(2).mean()  # noqa: N806
            U.backward()
            opt.step()
    messages = [f.message for f in watch.findings if f.rule == "missing-zero-grad"]
    assert messages and messages[0].endswith(
        "Call opt.zero_grad() before U.backward() in each step."
    ), messages


def test_two_backward_lines_before_a_step_name_the_first() -> None:
    """DCGAN's discriminator: ``errD_real.backward(); errD_fake.backward()`` then the step, with
    zero_grad() forgotten: "before errD_fake.backward()" would erase errD_real's gradients, so
    the fix names the first of the two."""
    with tensor_dap.watch(rules=["missing-zero-grad", "grad-lost"]) as watch:
        netD = nn.Linear(2, 1)
        optimizerD = torch.optim.SGD(netD.parameters(), lr=1e-3)
        for _ in range(3):
            errD_real = netD(torch.randn(8, 2)).mean()
            errD_real.backward()
            errD_fake = -netD(torch.randn(8, 2)).mean()
            errD_fake.backward()
            optimizerD.step()
    messages = [f.message for f in watch.findings if f.rule == "missing-zero-grad"]
    assert messages and messages[0].endswith(
        "Call optimizerD.zero_grad() before errD_real.backward() in each step."
    ), messages


def test_a_gans_two_optimizers_are_each_told_their_own_backward_line() -> None:
    """A GAN's loop with no zero_grad() at all: ``lossD.backward(); optD.step()`` then
    ``lossG.backward(); optG.step()``. Each optimizer's advice names the backward() run since
    the other's step (the one computing its gradients), not "loss.backward()", which the
    program does not have."""
    with tensor_dap.watch(rules=["missing-zero-grad", "grad-lost"]) as watch:
        netG, netD = nn.Linear(4, 2), nn.Linear(2, 1)
        optD = torch.optim.Adam(netD.parameters(), lr=2e-4)
        optG = torch.optim.Adam(netG.parameters(), lr=2e-4)
        for _ in range(3):
            fake = netG(torch.randn(8, 4))
            lossD = netD(fake.detach()).mean() - netD(torch.randn(8, 2)).mean()
            lossD.backward()
            optD.step()
            lossG = -netD(fake).mean()
            lossG.backward()
            optG.step()
    ends = sorted(f.message.rsplit(": ", 1)[-1] for f in watch.findings)
    assert any(
        e.endswith("Call optD.zero_grad() before lossD.backward() in each step.") for e in ends
    ), ends
    assert any(
        e.endswith("Call optG.zero_grad() before lossG.backward() in each step.") for e in ends
    ), ends


def test_a_long_list_of_stale_parameters_says_how_many_it_leaves_out() -> None:
    """Eight stale parameters: the message shows four and counts the rest."""
    with tensor_dap.watch(rules=["missing-zero-grad"]) as watch:
        model = nn.Sequential(*(nn.Linear(3, 3) for _ in range(4)))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(3):
            model(torch.randn(2, 3)).sum().backward()
            opt.step()
    (message,) = {f.message for f in watch.findings}
    assert "8 of 8 parameters" in message
    assert " and 4 more):" in message, message


class _UncertaintyTrainer:
    """A trainer holding the model and the task weights (``self.model.zero_grad()``)."""

    def __init__(self) -> None:
        self.model = nn.Linear(3, 2)
        self.log_vars = nn.Parameter(torch.zeros(2))
        self.optimizer = torch.optim.Adam([*self.model.parameters(), self.log_vars], lr=5e-3)

    def fit(self, steps: int) -> None:
        for _ in range(steps):
            self.model.zero_grad()
            losses = self.model(torch.randn(8, 3)).pow(2).mean(0)
            (torch.exp(-self.log_vars) * losses + self.log_vars).sum().backward()
            self.optimizer.step()


def test_a_trainers_model_zero_grad_that_misses_its_task_weights_is_named() -> None:
    """The same bug in a trainer: ``self.model.zero_grad()`` is the call named."""
    with tensor_dap.watch(rules=["missing-zero-grad"]) as watch:
        _UncertaintyTrainer().fit(4)
    zero = _line_of_source(_UncertaintyTrainer.fit, "self.model.zero_grad()")
    (message,) = {f.message for f in watch.findings}
    assert message.endswith(
        f"self.model.zero_grad() at test_missing_zero_grad_forms.py:{zero} zeroes self.model's "
        "parameters only, and these are not among them. Call self.optimizer.zero_grad() there "
        "instead: it zeroes every parameter self.optimizer steps."
    ), message
