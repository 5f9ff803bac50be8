"""``grad-lost`` finds ``zero_grad()`` placed between ``backward()`` and ``step()``: the step
applies none of the gradients the backward computed, every step, and the loss never moves. The
usual orders, gradient accumulation, a closure and two optimizers of a GAN stay quiet."""

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


def _setup(device: str) -> tuple[nn.Module, torch.optim.Optimizer, list]:
    torch.manual_seed(0)
    where = accelerator_device() if device == "accel" else torch.device("cpu")
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).to(where)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    batches = [(torch.randn(8, 4, device=where), torch.randn(8, 1, device=where))] * 4
    return model, optimizer, batches


def zero_grad_after_backward(device: str) -> None:
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.zero_grad()  # erased
        optimizer.step()


def gradients_zeroed_in_place_after_backward(device: str) -> None:
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        F.mse_loss(model(x), y).backward()
        optimizer.zero_grad(set_to_none=False)  # erased
        optimizer.step()


def zeros_clipped_after_backward(device: str) -> None:
    """The zeros ``set_to_none=False`` leaves, clipped in place (``_foreach_mul_``): zeros."""
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        F.mse_loss(model(x), y).backward()
        optimizer.zero_grad(set_to_none=False)  # erased
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=device == "cpu")
        optimizer.step()


def model_zero_grad_after_backward(device: str) -> None:
    """The tutorials' ``net.zero_grad()``, the module's own, in the wrong place."""
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        F.mse_loss(model(x), y).backward()
        model.zero_grad()  # erased
        optimizer.step()


def model_zero_grad_in_place_after_backward(device: str) -> None:
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        F.mse_loss(model(x), y).backward()
        model.zero_grad(set_to_none=False)  # erased
        optimizer.step()


def model_zero_grad_first_dcgan_style(device: str) -> None:
    """DCGAN's loop: each network's own zero_grad() before its losses' backward()."""
    generator, opt_g, batches = _setup(device)
    discriminator = nn.Linear(1, 1).to(batches[0][0].device)
    opt_d = torch.optim.Adam(discriminator.parameters())
    for x, y in batches:
        discriminator.zero_grad()
        fake = generator(x)
        (discriminator(fake.detach()).mean() - discriminator(y).mean()).backward()
        opt_d.step()
        generator.zero_grad()
        (-discriminator(fake).mean()).backward()
        discriminator.zero_grad()  # the discriminator's gradients from G's loss: not G's step
        opt_g.step()


def frozen_part_cleared_before_the_step(device: str) -> None:
    """The first layer's gradients cleared so that the step updates the rest alone (a frozen
    backbone during warm-up): the step still applies gradients."""
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        model[0].zero_grad()
        optimizer.step()


def zero_grad_first(device: str) -> None:
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()


def zero_grad_after_step(device: str) -> None:
    model, optimizer, batches = _setup(device)
    optimizer.zero_grad()
    optimizer.step()  # a step before training (a scheduler's warm-up order): no backward yet
    for x, y in batches:
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()


def accumulation_over_two_batches(device: str) -> None:
    model, optimizer, batches = _setup(device)
    for i, (x, y) in enumerate(batches):
        (F.mse_loss(model(x), y) / 2).backward()
        if i % 2 == 1:
            optimizer.step()
            optimizer.zero_grad()


def closure_zeroes_inside_the_step(device: str) -> None:
    model, _, batches = _setup(device)
    optimizer = torch.optim.LBFGS(model.parameters(), max_iter=2)
    for x, y in batches:

        def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            return loss

        optimizer.step(closure)


def gan_with_two_optimizers(device: str) -> None:
    generator, opt_g, batches = _setup(device)
    discriminator = nn.Linear(1, 1).to(batches[0][0].device)
    opt_d = torch.optim.Adam(discriminator.parameters())
    for x, y in batches:
        fake = generator(x)
        opt_d.zero_grad()
        (discriminator(fake.detach()).mean() - discriminator(y).mean()).backward()
        opt_d.step()
        opt_g.zero_grad()
        (-discriminator(fake).mean()).backward()
        opt_g.step()


def ensemble_trained_side_by_side(device: str) -> None:
    """A deep ensemble: one loop line's backward() for each member in turn, each member's
    optimizer zeroed before it: the backward() calls between one member's steps are the
    others'."""
    torch.manual_seed(0)
    at = torch.device(device) if device == "cpu" else accelerator_device()
    members = [nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1)).to(at) for _ in range(4)]
    optimizers = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in members]
    x, y = torch.randn(32, 3, device=at), torch.randn(32, 1, device=at)
    for _ in range(5):
        for member, optimizer in zip(members, optimizers):
            loss = F.mse_loss(member(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def reptile_meta_gradients_set_by_hand(device: str) -> None:
    """Reptile: an inner loop trains a copy; the meta optimizer's gradients are then set by
    hand after its zero_grad() (a federated server does the same)."""
    import copy

    model, meta_optimizer, batches = _setup(device)
    for x, y in batches:
        fast = copy.deepcopy(model)
        inner = torch.optim.SGD(fast.parameters(), lr=0.1)
        for _ in range(2):
            inner.zero_grad()
            F.mse_loss(fast(x), y).backward()
            inner.step()
        meta_optimizer.zero_grad()
        for p, q in zip(model.parameters(), fast.parameters()):
            p.grad = p.data - q.data
        meta_optimizer.step()


def zeros_clipped_in_the_usual_order(device: str) -> None:
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        optimizer.zero_grad(set_to_none=False)
        F.mse_loss(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()


def zeros_then_gradients_added_by_hand(device: str) -> None:
    """A federated server's update: the clients' gradients added into the zeros, then scaled."""
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        F.mse_loss(model(x), y).backward()
        client = [p.grad.clone() for p in model.parameters()]
        optimizer.zero_grad(set_to_none=False)
        for p, g in zip(model.parameters(), client):
            p.grad.add_(g)
            p.grad.mul_(0.5)
        optimizer.step()


def second_stage_with_a_new_optimizer(device: str) -> None:
    """A new stage's optimizer zeroed and stepped once to start its scheduler, after the
    first stage's backward() calls."""
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    finetune = torch.optim.Adam(model.parameters(), lr=1e-4)
    finetune.zero_grad()
    finetune.step()
    for x, y in batches:
        finetune.zero_grad()
        F.mse_loss(model(x), y).backward()
        finetune.step()


def _found(program: Callable[[str], None], device: str) -> list[tuple[int, str]]:
    with tensor_dap.watch(rules=["grad-lost"]) as watch:
        program(device)
    assert not watch.failed
    return [(f.line, f.message) for f in watch.findings]


def _marked(program: Callable[[str], None]) -> int:
    lines, start = inspect.getsourcelines(program)
    return next(start + i for i, text in enumerate(lines) if text.rstrip().endswith("# erased"))


@pytest.mark.parametrize("device", DEVICES)
def test_zero_grad_between_backward_and_step_is_found_at_its_line(device: str) -> None:
    ((line, message),) = _found(zero_grad_after_backward, device)
    assert line == _marked(zero_grad_after_backward)
    assert message.startswith("`optimizer.zero_grad()` runs after backward() at ")
    assert "it erases the gradients backward() computed, so step() applies none" in message
    assert "(4 of 4 parameters have no gradient)" in message
    assert "Call optimizer.zero_grad() before loss.backward() (or after optimizer.step())." in (
        message
    )


def test_gradients_zeroed_in_place_are_said_to_be_zeros() -> None:
    ((line, message),) = _found(gradients_zeroed_in_place_after_backward, "cpu")
    assert line == _marked(gradients_zeroed_in_place_after_backward)
    assert "(the gradients it applies are zeros)" in message


@pytest.mark.parametrize("device", DEVICES)
def test_a_models_own_zero_grad_between_backward_and_step_is_found(device: str) -> None:
    ((line, message),) = _found(model_zero_grad_after_backward, device)
    assert line == _marked(model_zero_grad_after_backward)
    assert message.startswith("`model.zero_grad()` runs after backward() at ")
    assert "before optimizer.step() at " in message
    assert "(4 of 4 parameters have no gradient)" in message
    assert "Call model.zero_grad() before loss.backward() (or after optimizer.step())." in message


@pytest.mark.parametrize("device", DEVICES)
def test_zeros_clipped_before_the_step_are_still_erased(device: str) -> None:
    """Clipping (or unscaling) the zeros scales them in place: still zeros, still erased — not
    gradients set by hand."""
    ((line, message),) = _found(zeros_clipped_after_backward, device)
    assert line == _marked(zeros_clipped_after_backward)
    assert "(the gradients it applies are zeros)" in message


def test_a_models_own_zero_grad_in_place_is_said_to_apply_zeros() -> None:
    ((line, message),) = _found(model_zero_grad_in_place_after_backward, "cpu")
    assert line == _marked(model_zero_grad_in_place_after_backward)
    assert "(the gradients it applies are zeros)" in message


@pytest.mark.parametrize(
    "program",
    [
        model_zero_grad_first_dcgan_style,
        frozen_part_cleared_before_the_step,
        zero_grad_first,
        zero_grad_after_step,
        accumulation_over_two_batches,
        closure_zeroes_inside_the_step,
        gan_with_two_optimizers,
        ensemble_trained_side_by_side,
        reptile_meta_gradients_set_by_hand,
        second_stage_with_a_new_optimizer,
        zeros_clipped_in_the_usual_order,
        zeros_then_gradients_added_by_hand,
    ],
    ids=lambda p: p.__name__,
)
def test_orders_that_keep_the_gradients_stay_quiet(program: Callable[[str], None]) -> None:
    assert _found(program, "cpu") == []


def amp_zero_grad_before_the_scalers_step(device: str) -> None:
    model, optimizer, batches = _setup(device)
    scaler = torch.amp.GradScaler(batches[0][0].device.type)
    for x, y in batches:
        scaler.scale(F.mse_loss(model(x), y)).backward()
        model.zero_grad()  # erased
        scaler.step(optimizer)
        scaler.update()


def amp_in_the_usual_order(device: str) -> None:
    model, optimizer, batches = _setup(device)
    scaler = torch.amp.GradScaler(batches[0][0].device.type)
    for x, y in batches:
        optimizer.zero_grad()
        scaler.scale(F.mse_loss(model(x), y)).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()


def test_a_grad_scaler_failing_for_erased_gradients_names_the_zero_grad_line() -> None:
    """The scaler raises at the first step, before optimizer.step(): the finding comes first,
    and the program's exception is its own."""
    with (
        tensor_dap.watch(rules=["grad-lost"]) as watch,
        pytest.raises(AssertionError, match="No inf checks were recorded for this optimizer"),
    ):
        amp_zero_grad_before_the_scalers_step("cpu")
    assert not watch.failed
    ((line, message),) = [(f.line, f.message) for f in watch.findings]
    assert line == _marked(amp_zero_grad_before_the_scalers_step)
    assert message.startswith("`model.zero_grad()` runs after backward() at ")
    assert "a GradScaler's step() raises 'No inf checks were recorded" in message


def test_a_grad_scaler_in_the_usual_order_stays_quiet() -> None:
    assert _found(amp_in_the_usual_order, "cpu") == []


def two_models_each_zeroed_once(device: str) -> None:
    """``a`` is zeroed after its own step, ``b`` before its step: only ``b``'s erases."""
    torch.manual_seed(0)
    where = accelerator_device() if device == "accel" else torch.device("cpu")
    a, b = nn.Linear(4, 4).to(where), nn.Linear(4, 1).to(where)
    opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(b.parameters(), lr=0.1)
    for _ in range(3):
        x, y = torch.randn(8, 4, device=where), torch.randn(8, 1, device=where)
        F.mse_loss(b(a(x)), y).backward()
        opt_a.step()
        a.zero_grad()
        b.zero_grad()  # erased
        opt_b.step()


def parts_zeroed_by_index(device: str) -> None:
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        F.mse_loss(model(x), y).backward()
        model[0].zero_grad()
        model[2].zero_grad()  # erased
        optimizer.step()


def test_the_zero_grad_that_erased_the_steps_gradients_is_named() -> None:
    ((line, message),) = _found(two_models_each_zeroed_once, "cpu")
    assert line == _marked(two_models_each_zeroed_once)
    assert "Call b.zero_grad() before loss.backward() (or after opt_b.step())." in message


def test_a_module_the_code_names_no_way_is_not_called_model() -> None:
    ((_, message),) = _found(parts_zeroed_by_index, "cpu")
    assert "Call model.zero_grad()" not in message
    assert "Move it before loss.backward() (or after optimizer.step())." in message


def _input_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """An FGSM attack's (or a saliency map's) helper: its own zero_grad() and backward()."""
    x = x.clone().requires_grad_(True)
    model.zero_grad()
    F.mse_loss(model(x), y).backward()
    return x.grad.sign()


def attack_between_backward_and_step(device: str) -> None:
    """Every other step, a helper's zero_grad() and backward() run between the training
    backward and the step: the step applies the attack's gradients."""
    model, optimizer, batches = _setup(device)
    for step, (x, y) in enumerate(batches * 2):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        if step % 2 == 1:
            _input_gradient(model, x, y)  # erased
        optimizer.step()


def attack_before_the_training_backward(device: str) -> None:
    """Adversarial training as written: the attack's gradients are erased by the step's own
    zero_grad() before the training backward."""
    model, optimizer, batches = _setup(device)
    for x, y in batches * 2:
        x_adv = (x + 0.1 * _input_gradient(model, x, y)).detach()
        optimizer.zero_grad()
        F.mse_loss(model(x_adv), y).backward()
        optimizer.step()


def sam_two_passes(device: str) -> None:
    """Sharpness-aware minimization: the first pass's gradients move the weights to the
    neighbour (read), are zeroed, and the second pass's are applied, every step."""
    model, optimizer, batches = _setup(device)
    for x, y in batches * 2:
        F.mse_loss(model(x), y).backward()
        with torch.no_grad():
            moves = [0.05 * p.grad / (p.grad.norm() + 1e-12) for p in model.parameters()]
            for p, e in zip(model.parameters(), moves):
                p.add_(e)
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        with torch.no_grad():
            for p, e in zip(model.parameters(), moves):
                p.sub_(e)
        optimizer.step()
        optimizer.zero_grad()


def per_task_gradient_norms_then_the_total(device: str) -> None:
    """GradNorm-style: each task's backward for its gradient norm, zeroed, then the total's."""
    model, optimizer, batches = _setup(device)
    for x, y in batches * 2:
        losses = [F.mse_loss(model(x), y), F.l1_loss(model(x), y)]
        norms = []
        for loss in losses:
            optimizer.zero_grad()
            loss.backward(retain_graph=True)
            norms.append(torch.stack([p.grad.norm() for p in model.parameters()]).norm())
        optimizer.zero_grad()
        weights = [1 / (n.item() + 1e-8) for n in norms]
        sum(w * loss for w, loss in zip(weights, losses)).backward()
        optimizer.step()


@pytest.mark.parametrize("device", DEVICES)
def test_a_helpers_zero_grad_and_backward_before_the_step_is_found_at_its_call(
    device: str,
) -> None:
    found = _found(attack_between_backward_and_step, device)
    assert {line for line, _ in found} == {_marked(attack_between_backward_and_step)}
    message = found[0][1]
    helper = inspect.getsourcelines(_input_gradient)
    zero_line = helper[1] + next(i for i, t in enumerate(helper[0]) if "model.zero_grad()" in t)
    assert message.startswith(
        f"`_input_gradient(model, x, y)` (its model.zero_grad() at "
        f"test_zero_grad_before_step.py:{zero_line}) runs after backward() at "
    )
    assert "the zero_grad() erases the gradients that backward() computed, and the " in message
    assert "fills them with its own, which this step applies instead. Move this line" in message


def gradient_cosine_logged_and_restored(device: str) -> None:
    """Every other step: the total's gradients saved, one task's backward into zeroed grads for
    a logged cosine, the saved gradients put back before the step (a reviewer's find)."""
    model, optimizer, batches = _setup(device)
    for step, (x, y) in enumerate(batches * 2):
        out = model(x)
        first, second = F.mse_loss(out, y), F.l1_loss(out, y)
        optimizer.zero_grad()
        (first + second).backward(retain_graph=True)
        if step % 2 == 1:
            saved = [p.grad.clone() for p in model.parameters()]
            optimizer.zero_grad()
            first.backward()
            torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
            for p, kept in zip(model.parameters(), saved):
                p.grad = kept
        optimizer.step()


@pytest.mark.parametrize(
    "program",
    [
        attack_before_the_training_backward,
        sam_two_passes,
        per_task_gradient_norms_then_the_total,
        gradient_cosine_logged_and_restored,
    ],
    ids=lambda p: p.__name__,
)
def test_second_passes_that_replace_gradients_on_purpose_stay_quiet(
    program: Callable[[str], None],
) -> None:
    assert _found(program, "cpu") == []


def accumulation_zeroed_inside_the_window(device: str) -> None:
    """Gradient accumulation over 4 micro-batches whose zero_grad() stayed in the micro-batch
    loop: each step applies the last micro-batch's gradients alone."""
    model, optimizer, batches = _setup(device)
    accumulation = 4
    for i, (x, y) in enumerate(batches * 3):
        optimizer.zero_grad()  # erased
        loss = F.mse_loss(model(x), y) / accumulation
        loss.backward()
        if (i + 1) % accumulation == 0:
            optimizer.step()


def sam_through_one_backward_helper(device: str) -> None:
    """SAM written with a helper whose one ``backward()`` line serves both passes."""
    model, optimizer, batches = _setup(device)

    def forward_backward(x: torch.Tensor, y: torch.Tensor) -> None:
        F.mse_loss(model(x), y).backward()

    for x, y in batches * 2:
        forward_backward(x, y)
        with torch.no_grad():
            moves = [0.05 * p.grad / (p.grad.norm() + 1e-12) for p in model.parameters()]
            for p, e in zip(model.parameters(), moves):
                p.add_(e)
        optimizer.zero_grad()
        forward_backward(x, y)
        with torch.no_grad():
            for p, e in zip(model.parameters(), moves):
                p.sub_(e)
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.parametrize("device", DEVICES)
def test_accumulation_whose_zero_grad_stayed_in_the_micro_batch_loop_is_found(device: str) -> None:
    ((line, message),) = set(_found(accumulation_zeroed_inside_the_window, device))
    assert line == _marked(accumulation_zeroed_inside_the_window)
    backward = _marked(accumulation_zeroed_inside_the_window) + 2
    assert message.startswith(
        "`optimizer.zero_grad()` runs between the 4 backward() calls at "
        f"test_zero_grad_before_step.py:{backward} whose gradients "
        "optimizer.step() at test_zero_grad_before_step.py:"
    )
    assert message.endswith(
        "accumulates: it erases the gradients of the 3 before it, so the step applies one "
        "micro-batch's gradients, not 4. Call optimizer.zero_grad() right after "
        "optimizer.step(), under the same condition."
    )


def test_two_passes_through_one_backward_helper_stay_quiet() -> None:
    assert _found(sam_through_one_backward_helper, "cpu") == []


def energy_zeroed_after_backward(device: str) -> None:
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        U = F.mse_loss(model(x), y)  # noqa: N806 (an energy, as the physics code names it)
        U.backward()
        optimizer.zero_grad()  # erased
        optimizer.step()


def test_the_advice_names_the_backward_call_as_the_program_writes_it() -> None:
    """An energy ``U.backward()`` (helper 70's SGLD sampler): the advice says "before
    U.backward()", not "before loss.backward()"; an expression's backward (``F.mse_loss(...)
    .backward()``) keeps "loss.backward()"."""
    ((_, message),) = _found(energy_zeroed_after_backward, "cpu")
    assert message.endswith(
        "Call optimizer.zero_grad() before U.backward() (or after optimizer.step())."
    )
    ((_, message),) = _found(gradients_zeroed_in_place_after_backward, "cpu")
    assert "before loss.backward() (or after" in message
