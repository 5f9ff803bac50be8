"""grad-lost: a gradient penalty made with ``autograd.grad(create_graph=True)`` and turned into a
Python number (``.item()``, ``float()``) before it reaches the loss: reported at that line; a
penalty kept a tensor in the loss (logged with ``.item()`` before or after the backward),
MAML's inner steps and double backprop are not."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from torch import nn

import tensor_dap


def _line_of(function, text: str) -> int:  # noqa: ANN001
    lines, first = inspect.getsourcelines(function)
    return next(first + i for i, line in enumerate(lines) if text in line)


def _findings(run) -> list[tuple[int, str]]:  # noqa: ANN001
    with tensor_dap.watch() as watch:  # (the default rules: grad-lost among them)
        run()
    return [(f.line, f.message) for f in watch.findings]


def _critic_and_generator() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    generator = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    critic = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 1))
    return generator, critic


def gradient_penalty(critic: nn.Module, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    alpha = torch.rand(real.size(0), 1)
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    scores = critic(mixed)
    grads = torch.autograd.grad(
        outputs=scores, inputs=mixed, grad_outputs=torch.ones_like(scores), create_graph=True
    )[0]
    return ((grads.norm(2, dim=1) - 1) ** 2).mean()


def penalty_as_item(critic: nn.Module, real: torch.Tensor, fake: torch.Tensor) -> float:
    alpha = torch.rand(real.size(0), 1)
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    scores = critic(mixed)
    grads = torch.autograd.grad(
        outputs=scores, inputs=mixed, grad_outputs=torch.ones_like(scores), create_graph=True
    )[0]
    return ((grads.norm(2, dim=1) - 1) ** 2).mean().item()


def wgan_gp_penalty_returned_as_item() -> None:
    generator, critic = _critic_and_generator()
    opt_d = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.5, 0.9))
    for _ in range(3):
        real, z = torch.randn(32, 2), torch.randn(32, 8)
        fake = generator(z).detach()
        gp = penalty_as_item(critic, real, fake)
        d_loss = critic(fake).mean() - critic(real).mean() + 10 * gp
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()


def r1_penalty_made_a_float_in_the_loop() -> None:
    _, critic = _critic_and_generator()
    opt_d = torch.optim.Adam(critic.parameters(), lr=1e-4)
    for _ in range(3):
        real = torch.randn(32, 2).requires_grad_(True)
        real_scores = critic(real)
        (grad_real,) = torch.autograd.grad(real_scores.sum(), real, create_graph=True)
        r1 = float(grad_real.pow(2).sum(1).mean())
        d_loss = nn.functional.softplus(-real_scores).mean() + 5.0 * r1
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()


@pytest.mark.parametrize(
    "program, line_text, call",
    [
        (wgan_gp_penalty_returned_as_item, ".mean().item()", ".item()"),
        (r1_penalty_made_a_float_in_the_loop, "r1 = float(", "float()"),
    ],
)
def test_a_penalty_turned_into_a_number_is_reported_at_that_line(
    program, line_text: str, call: str
) -> None:  # noqa: ANN001
    found = _findings(program)
    source = penalty_as_item if program is wgan_gp_penalty_returned_as_item else program
    line = _line_of(source, line_text)
    assert [at for at, _ in found] == [line], found
    message = found[0][1]
    assert f"{call} turns a value made of the gradients of torch.autograd.grad(" in message
    assert "create_graph=True) at test_penalty_as_number.py:" in message
    assert "adds a constant to the loss and trains nothing" in message
    assert f"leave out {call}" in message
    step_line = _line_of(program, "opt_d.step()")
    assert f"no backward() before opt_d.step() at test_penalty_as_number.py:{step_line}" in message


def wgan_gp_logged_before_the_backward() -> None:
    generator, critic = _critic_and_generator()
    opt_d = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.5, 0.9))
    log = []
    for _ in range(3):
        real, z = torch.randn(32, 2), torch.randn(32, 8)
        fake = generator(z).detach()
        gp = gradient_penalty(critic, real, fake)
        log.append(gp.item())
        d_loss = critic(fake).mean() - critic(real).mean() + 10 * gp
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()


def wgan_gp_logged_after_the_backward() -> None:
    generator, critic = _critic_and_generator()
    opt_d = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.5, 0.9))
    opt_g = torch.optim.Adam(generator.parameters(), lr=1e-4, betas=(0.5, 0.9))
    for step in range(4):
        real, z = torch.randn(32, 2), torch.randn(32, 8)
        fake = generator(z)
        gp = gradient_penalty(critic, real, fake.detach())
        d_loss = critic(fake.detach()).mean() - critic(real).mean() + 10 * gp
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
        print(f"d_loss {d_loss.item():.3f} gp {float(gp):.3f}")
        if step % 2 == 0:
            g_loss = -critic(fake).mean()
            opt_g.zero_grad()
            g_loss.backward()
            opt_g.step()


def wgan_gp_penalty_backpropagated_on_its_own() -> None:
    """The penalty logged, then backpropagated by a backward() of its own after the critic's
    (as caogang/wgan-gp does): the first backward() does not go through it, the second does."""
    generator, critic = _critic_and_generator()
    opt_d = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.5, 0.9))
    for _ in range(3):
        real, z = torch.randn(32, 2), torch.randn(32, 8)
        fake = generator(z).detach()
        gp = gradient_penalty(critic, real, fake)
        print(f"gp {gp.item():.3f}")
        opt_d.zero_grad()
        (critic(fake).mean() - critic(real).mean()).backward()
        (10 * gp).backward()
        opt_d.step()


def maml_inner_steps_with_logged_losses() -> None:
    torch.manual_seed(0)
    weight = torch.randn(4, 1, requires_grad=True)
    meta_opt = torch.optim.SGD([weight], lr=0.01)
    for _ in range(3):
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        fast = weight
        inner_losses = []
        for _inner in range(2):
            loss = ((x @ fast - y) ** 2).mean()
            inner_losses.append(loss.item())
            (grad,) = torch.autograd.grad(loss, fast, create_graph=True)
            fast = fast - 0.1 * grad
        query_loss = ((x @ fast - y) ** 2).mean()
        meta_opt.zero_grad()
        query_loss.backward()
        meta_opt.step()


def double_backprop_regularizer_logged() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(3):
        x, y = torch.randn(16, 4).requires_grad_(True), torch.randint(0, 3, (16,))
        loss = nn.functional.cross_entropy(model(x), y)
        (gx,) = torch.autograd.grad(loss, x, create_graph=True)
        reg = gx.pow(2).sum()
        print(f"reg {reg.item():.4f}")
        opt.zero_grad()
        (loss + 0.1 * reg).backward()
        opt.step()


@pytest.mark.parametrize(
    "program",
    [
        wgan_gp_logged_before_the_backward,
        wgan_gp_logged_after_the_backward,
        wgan_gp_penalty_backpropagated_on_its_own,
        maml_inner_steps_with_logged_losses,
        double_backprop_regularizer_logged,
    ],
)
def test_a_penalty_kept_in_the_loss_is_not_reported(program) -> None:  # noqa: ANN001
    assert _findings(program) == []


_PROGRAMS = Path(__file__).parent / "grad_lost_programs"


@pytest.mark.parametrize(
    "name",
    [
        "bug_pinn_dict_losses",  # (a PINN's loss terms in a dict, one of them an .item())
        "bug_jacobian_reg_tolist",  # (per-sample norms through .tolist())
        "bug_ebm_contrastive_gp",  # (a helper returning (loss, gp.item()))
        "bug_amp_gradscaler_gp_float",  # (the AMP recipe's penalty made a float())
    ],
)
def test_a_helpers_penalty_turned_into_a_number_is_found_at_its_line(check, name: str) -> None:  # noqa: ANN001
    """Programs a helper wrote the way public code is written, one bug each at `# BUG`."""
    script = _PROGRAMS / f"penalty_{name}.py"
    run = check(script)
    lines = script.read_text().splitlines()
    marked = next(n for n, text in enumerate(lines, 1) if text.rstrip().endswith("# BUG"))
    found = run.report["findings"]
    # (the AMP recipe's `grad_norm += ...` total freed at the float() line: no graph-kept too)
    assert [(f["rule"], f["line"]) for f in found] == [("grad-lost", marked)], found
    assert "create_graph=True" in found[0]["message"]


@pytest.mark.parametrize(
    "name",
    [
        "ok_pinn_burgers",  # (Adam, then LBFGS with a closure)
        "ok_maml_sine",
        "ok_stylegan2_lazy_r1",
        "ok_hessian_trace",
        "ok_amp_gradscaler_gp",
    ],
)
def test_a_helpers_create_graph_programs_are_clean(check, name: str) -> None:  # noqa: ANN001
    run = check(_PROGRAMS / f"penalty_{name}.py")
    assert run.report["findings"] == []
