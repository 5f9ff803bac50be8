"""``grad-lost``: a derivative taken by ``torch.autograd.grad`` without ``create_graph=True`` and
trained through as a factor of a loss term (a PINN's ``u_t - k * u_xx`` with ``u_xx`` taken
with ``retain_graph=True`` only: no error, the network learns from ``u_t`` alone). Reported at
the term's line, naming the gradient and its line; first-order MAML, adversarial examples, a
fixed density's score and a gradient kept as a weight on purpose stay quiet."""

from __future__ import annotations

import inspect
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap


def _findings(program: Callable[[bool], None], bug: bool) -> list[tuple[int, str]]:
    with tensor_dap.watch(rules=["grad-lost"]) as watch:
        program(bug)
    assert not watch.failed
    return [(f.line, f.message) for f in watch.findings]


def _line_of(function: Callable[..., None], text: str) -> int:
    lines, first = inspect.getsourcelines(function)
    return next(first + i for i, line in enumerate(lines) if text in line)


def heat_pinn_inverse(bug: bool) -> None:
    """The heat equation's diffusivity learned with the network (log k a parameter)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
    log_k = nn.Parameter(torch.tensor(-2.0))
    optimizer = torch.optim.Adam([*net.parameters(), log_k], lr=1e-3)
    for _ in range(4):
        x = torch.rand(32, 1).requires_grad_(True)
        t = torch.rand(32, 1).requires_grad_(True)
        u = net(torch.cat([x, t], dim=1))
        ones = torch.ones_like(u)
        u_t = torch.autograd.grad(u, t, ones, create_graph=True)[0]
        u_x = torch.autograd.grad(u, x, ones, create_graph=True)[0]
        u_xx = torch.autograd.grad(
            u_x, x, torch.ones_like(u_x), retain_graph=True, create_graph=not bug
        )[0]
        residual = u_t - log_k.exp() * u_xx  # term
        loss = residual.pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def burgers_pinn_fixed_viscosity(bug: bool) -> None:
    """Burgers' equation u_t + u u_x - nu u_xx with a number for nu."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-3)
    for _ in range(4):
        xt = torch.rand(32, 2)
        x, t = xt[:, :1].clone().requires_grad_(True), xt[:, 1:].clone().requires_grad_(True)
        u = net(torch.cat([x, t], dim=1))
        u_x, u_t = torch.autograd.grad(u, (x, t), torch.ones_like(u), create_graph=True)
        u_xx = torch.autograd.grad(u_x.sum(), x, retain_graph=True, create_graph=not bug)[0]
        loss = (u_t + u * u_x - 0.01 / torch.pi * u_xx).pow(2).mean()  # term
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def poisson_pinn_stacked_coordinates(bug: bool) -> None:
    """Poisson's equation in 2-D with the derivatives taken w.r.t. the stacked coordinates (a
    tensor computed from the two leaves, not a leaf itself)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(4):
        x = torch.rand(32, 1, requires_grad=True)
        y = torch.rand(32, 1, requires_grad=True)
        xy = torch.cat([x, y], dim=1)
        u = net(xy)
        du = torch.autograd.grad(u.sum(), xy, create_graph=True)[0]
        u_x, u_y = du[:, :1], du[:, 1:]
        u_xx = torch.autograd.grad(u_x.sum(), xy, retain_graph=True, create_graph=not bug)[0]
        u_yy = torch.autograd.grad(u_y.sum(), xy, create_graph=True)[0][:, 1:]
        f = -2 * torch.pi**2 * torch.sin(torch.pi * x) * torch.sin(torch.pi * y)
        residual = u_xx[:, :1] + u_yy - f  # term
        loss = residual.pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@pytest.mark.parametrize(
    "program", [heat_pinn_inverse, burgers_pinn_fixed_viscosity, poisson_pinn_stacked_coordinates]
)
def test_a_derivative_without_a_graph_in_a_residual_is_named_at_the_term(program) -> None:  # noqa: ANN001
    ((line, message),) = set(_findings(program, bug=True))
    assert line == _line_of(program, "# term")
    grad_line = _line_of(program, "u_xx = torch.autograd.grad(")
    assert (
        "u_xx is the gradient torch.autograd.grad returned at "
        f"test_frozen_derivatives.py:{grad_line}" in message
    )
    assert "without create_graph=True, which has no history of its own" in message
    assert "through the term's other factors only, never through u_xx" in message
    assert message.endswith("Pass create_graph=True to that torch.autograd.grad.")
    assert _findings(program, bug=False) == []


def first_order_maml(bug: bool) -> None:
    """First-order MAML: the inner step's gradients taken without a graph on purpose."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    meta = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(4):
        xs, ys, xq, yq = torch.randn(8, 4), torch.randn(8, 1), torch.randn(8, 4), torch.randn(8, 1)
        weight, bias = model.weight, model.bias
        support = F.mse_loss(F.linear(xs, weight, bias), ys)
        g_weight, g_bias = torch.autograd.grad(support, (weight, bias))
        fast_weight, fast_bias = weight - 0.1 * g_weight, bias - 0.1 * g_bias
        query = F.mse_loss(F.linear(xq, fast_weight, fast_bias), yq)
        meta.zero_grad()
        query.backward()
        meta.step()


def l2_adversarial_training(bug: bool) -> None:
    """Adversarial examples from the input's gradient, normalized (no sign)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        x, y = torch.randn(8, 4).requires_grad_(True), torch.randint(0, 3, (8,))
        g = torch.autograd.grad(F.cross_entropy(model(x), y), x)[0]
        x_adv = x + 0.1 * g / g.norm(dim=1, keepdim=True)
        loss = F.cross_entropy(model(x_adv), y) + F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def score_of_a_fixed_density(bug: bool) -> None:
    """Score matching against the score of a fixed Gaussian (no parameter behind it)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(4):
        x = torch.randn(16, 2).requires_grad_(True)
        score = torch.autograd.grad((-0.5 * x.pow(2)).sum(), x)[0]
        loss = (model(x) - score).pow(2).sum(dim=1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def saliency_weighted_loss(bug: bool) -> None:
    """Per-input weights from the input gradient's size, detached on purpose."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        x, y = torch.randn(8, 4).requires_grad_(True), torch.randn(8, 1)
        out = model(x)
        weight = torch.autograd.grad(out.sum(), x, retain_graph=True)[0].norm(dim=1).detach()
        loss = (weight * (out - y).pow(2).squeeze(1)).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def embedding_adversarial_training(bug: bool) -> None:
    """Adversarial training on word embeddings (FGM): the gradient w.r.t. the embedding
    layer's output, a tensor computed from a parameter, is a perturbation direction."""
    torch.manual_seed(0)
    embedding, head = nn.Embedding(50, 8), nn.Linear(8, 2)
    optimizer = torch.optim.Adam([*embedding.parameters(), *head.parameters()], lr=1e-3)
    for _ in range(4):
        tokens, labels = torch.randint(0, 50, (4, 6)), torch.randint(0, 2, (4,))
        embeds = embedding(tokens)
        loss = F.cross_entropy(head(embeds.mean(1)), labels)
        g = torch.autograd.grad(loss, embeds, retain_graph=True)[0]
        perturbed = embeds + 0.5 * g / (g.norm() + 1e-8)
        adv_loss = F.cross_entropy(head(perturbed.mean(1)), labels)
        optimizer.zero_grad()
        (loss + adv_loss).backward()
        optimizer.step()


def virtual_adversarial_training_on_embeddings(bug: bool) -> None:
    """Text VAT: the direction of the embeddings' worst perturbation, found by a power
    iteration on a random direction (a leaf), normalized and kept constant on purpose."""
    torch.manual_seed(0)
    embedding, head = nn.Embedding(50, 8), nn.Linear(8, 2)
    optimizer = torch.optim.Adam([*embedding.parameters(), *head.parameters()], lr=1e-3)
    for _ in range(4):
        embeds = embedding(torch.randint(0, 50, (4, 6)))
        with torch.no_grad():
            clean = F.softmax(head(embeds.mean(1)), dim=1)
        d = torch.randn(embeds.shape).requires_grad_(True)
        noisy = head((embeds + 1e-6 * d).mean(1))
        distance = F.kl_div(F.log_softmax(noisy, dim=1), clean, reduction="batchmean")
        grad_d = torch.autograd.grad(distance, d, retain_graph=True)[0]
        r_adv = 2.0 * F.normalize(grad_d.flatten(1), dim=1).view_as(grad_d)
        adversarial = head((embeds + r_adv).mean(1))
        loss = F.kl_div(F.log_softmax(adversarial, dim=1), clean, reduction="batchmean")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def saliency_norm_weights(bug: bool) -> None:
    """Per-example weights from the size of the input gradient, without ``.detach()`` (the
    gradient has no history anyway)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        x, y = torch.randn(8, 4).requires_grad_(True), torch.randn(8, 1)
        pred = model(x)
        saliency = torch.autograd.grad(pred.sum(), x, retain_graph=True)[0]
        weights = saliency.norm(dim=1, keepdim=True)
        loss = (weights / weights.mean() * (pred - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def jacobian_matching_distillation(bug: bool) -> None:
    """A student's input Jacobian matched to a teacher's at the same points: the teacher's,
    taken without a graph, is the target (the points are leaves of both)."""
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
    student = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    optimizer = torch.optim.Adam(student.parameters(), lr=1e-3)
    for _ in range(4):
        x = torch.randn(16, 4).requires_grad_(True)
        target = torch.autograd.grad(teacher(x)[:, 0].sum(), x)[0]
        jacobian = torch.autograd.grad(student(x)[:, 0].sum(), x, create_graph=True)[0]
        loss = (jacobian - target).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@pytest.mark.parametrize(
    "program",
    [
        virtual_adversarial_training_on_embeddings,
        saliency_norm_weights,
        jacobian_matching_distillation,
        first_order_maml,
        l2_adversarial_training,
        score_of_a_fixed_density,
        saliency_weighted_loss,
        embedding_adversarial_training,
    ],
)
def test_gradients_meant_as_constants_stay_quiet(program) -> None:  # noqa: ANN001
    assert _findings(program, bug=True) == []
