"""``grad-lost`` finds a step whose parameters took part in the forward only under
``torch.no_grad()``: a GAN's generator run under ``no_grad`` and its output reused for the
generator's own step (nothing trains, silently). A frozen backbone beside a trained head, a
teacher, a target network, a rollout and an evaluation under ``no_grad`` stay quiet."""

from __future__ import annotations

import inspect
import warnings
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import tensor_dap


def _found(program: Callable[[], None]) -> list[tuple[int, str]]:
    with tensor_dap.watch(rules=["grad-lost"]) as watch:
        program()
    assert not watch.failed
    return [(f.line, f.message) for f in watch.findings]


def _line(program: Callable[[], None], text: str) -> int:
    lines, start = inspect.getsourcelines(program)
    return next(start + i for i, line in enumerate(lines) if text in line)


def gan_generator_under_no_grad() -> None:
    torch.manual_seed(0)
    net_g = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    net_d = nn.Sequential(nn.Linear(2, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
    opt_g = torch.optim.Adam(net_g.parameters(), lr=1e-3)
    opt_d = torch.optim.Adam(net_d.parameters(), lr=1e-3)
    for _ in range(3):
        real = torch.randn(16, 2)
        with torch.no_grad():
            fake = net_g(torch.randn(16, 4))
        opt_d.zero_grad()
        d_loss = F.softplus(-net_d(real)).mean() + F.softplus(net_d(fake)).mean()
        d_loss.backward()
        opt_d.step()
        opt_g.zero_grad()
        g_loss = F.softplus(-net_d(fake)).mean()
        g_loss.backward()
        opt_g.step()


def linear_probe() -> None:
    """The backbone under no_grad, its parameters in the optimizer beside the head's."""
    torch.manual_seed(0)
    backbone, head = nn.Linear(4, 8), nn.Linear(8, 3)
    optimizer = torch.optim.SGD([*backbone.parameters(), *head.parameters()], lr=0.1)
    for _ in range(3):
        with torch.no_grad():
            features = backbone(torch.randn(8, 4))
        optimizer.zero_grad()
        F.cross_entropy(head(features), torch.randint(0, 3, (8,))).backward()
        optimizer.step()


def distillation_and_target_network() -> None:
    torch.manual_seed(0)
    teacher, student, target = nn.Linear(4, 3), nn.Linear(4, 3), nn.Linear(4, 3)
    optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(8, 4)
        with torch.no_grad():
            soft = teacher(x).softmax(-1)
            bootstrap = target(x).max(-1).values
        loss = F.kl_div(student(x).log_softmax(-1), soft, reduction="batchmean")
        loss = loss + (student(x).max(-1).values - bootstrap).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def rollout_then_update_and_evaluation() -> None:
    torch.manual_seed(0)
    policy = nn.Linear(4, 2)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    for _ in range(3):
        with torch.no_grad():
            for _ in range(4):
                policy(torch.randn(1, 4)).argmax(-1)
        optimizer.zero_grad()
        policy(torch.randn(8, 4)).logsumexp(-1).mean().backward()
        optimizer.step()
        with torch.no_grad():
            policy(torch.randn(8, 4))


def test_a_generator_stepped_after_a_forward_under_no_grad_is_found() -> None:
    ((line, message),) = set(_found(gan_generator_under_no_grad))
    block = _line(gan_generator_under_no_grad, "with torch.no_grad():")
    step = _line(gan_generator_under_no_grad, "opt_g.step()")
    assert line == block  # (the line to change; paused at the step)
    assert message.startswith(
        f"`with torch.no_grad():`: opt_g.step() at test_trained_under_no_grad.py:{step} "
        "`opt_g.step()` applies no gradient: none of its 4 parameters has one. They took part "
        "in this step's forward only under this block (net_g.0.weight, "
    )
    assert "backward() ran, but through no op of theirs" in message


@pytest.mark.parametrize(
    "program",
    [linear_probe, distillation_and_target_network, rollout_then_update_and_evaluation],
    ids=lambda p: p.__name__,
)
def test_parameters_meant_to_be_used_under_no_grad_stay_quiet(
    program: Callable[[], None],
) -> None:
    assert _found(program) == []


class _Checkpointed(nn.Module):
    """A deep MLP whose first segments run under a reentrant checkpoint, the batch first."""

    def __init__(self, reentrant: bool, first_checkpointed: bool) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Linear(6, 8), nn.GELU())
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 8)) for _ in "ab")
        self.head = nn.Linear(8, 3)
        self.reentrant, self.first = reentrant, first_checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x if self.first else self.stem(x)
        for layer in ([self.stem] if self.first else []) + list(self.blocks):
            h = checkpoint(layer, h, use_reentrant=self.reentrant)
        return self.head(h)


def train_checkpointed(reentrant: bool, first_checkpointed: bool, snapshot: bool = False) -> None:
    torch.manual_seed(0)
    model = _Checkpointed(reentrant, first_checkpointed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if snapshot:  # (to see later how far training moved it)
        initial = model.stem[0].weight.detach().clone()
        assert initial.shape == (8, 6)
    for _ in range(3):
        x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.parametrize("snapshot", [False, True], ids=["plain", "weights-snapshot-first"])
def test_a_reentrant_checkpoint_fed_no_grad_input_is_found_at_its_call(snapshot: bool) -> None:
    # (a snapshot `w0 = layer.weight.detach().clone()` before training is no use with gradients)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's: "None of the inputs have requires_grad")
        found = _found(lambda: train_checkpointed(True, True, snapshot))
    ((line, message),) = set(found)
    assert line == _line(_Checkpointed.forward, "h = checkpoint(")
    step = _line(train_checkpointed, "opt.step()")
    assert message == (
        "`h = checkpoint(layer, h, use_reentrant=self.reentrant)`: none of this reentrant "
        "checkpoint's inputs requires grad, so it ran its function under no_grad and backward() "
        "never comes back to it: 10 of opt's 12 parameters (model.stem.0.weight, "
        "model.stem.0.bias, model.blocks.0.0.weight, model.blocks.0.0.bias and 6 more) get no "
        f"gradient, and opt.step() at test_trained_under_no_grad.py:{step} `opt.step()` leaves "
        "them as they are. Pass use_reentrant=False, or make the input require grad "
        "(`h.requires_grad_()`) before the first checkpoint."
    )


@pytest.mark.parametrize(
    ("reentrant", "first_checkpointed"), [(True, False), (False, True), (False, False)]
)
def test_checkpoints_that_backward_comes_back_to_stay_quiet(
    reentrant: bool, first_checkpointed: bool
) -> None:
    """Reentrant after an uncheckpointed stem (its input has history), or not reentrant."""
    assert _found(lambda: train_checkpointed(reentrant, first_checkpointed)) == []
