"""``optimizer-remade``: an optimizer with state made again for the same parameters after each
step is found at the line that makes it, whatever the optimizer and wherever the line (the loop
itself, a function each step calls); optimizers made again with nothing to lose (SGD without
momentum), made per epoch or per task and stepped many times, or made for new parameters each
time (a new model per trial, MAML's copies) stay quiet."""

from __future__ import annotations

import copy
import inspect
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.agent import optimizers
from tensor_dap.testing import accelerator_device

RULE = "optimizer-remade"


def _line_of(function: Callable[..., Any], text: str) -> int:
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _batches(device: torch.device, count: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    xs = [torch.randn(16, 4, device=device) for _ in range(count)]
    return [(x, x.sum(dim=1, keepdim=True)) for x in xs]


def _findings(program: Callable[[torch.device], None], device: torch.device) -> list[Any]:
    with tensor_dap.watch(rules=[RULE]) as watch:
        program(device)
    return [f for f in watch.findings if f.rule == RULE]


def adam_in_the_loop(device: torch.device) -> None:
    model = nn.Linear(4, 1).to(device)
    for x, y in _batches(device):
        opt = torch.optim.Adam(model.parameters(), lr=0.1)  # made per step
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def _momentum_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)  # made per step
    loss = F.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def momentum_in_a_step_function(device: torch.device) -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)).to(device)
    for x, y in _batches(device):
        _momentum_step(model, x, y)


def adamw_param_groups_in_the_loop(device: torch.device) -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 1)).to(device)
    decay = [p for name, p in model.named_parameters() if name.endswith("weight")]
    no_decay = [p for name, p in model.named_parameters() if name.endswith("bias")]
    for x, y in _batches(device):
        groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay}]
        optimizer = torch.optim.AdamW(groups, lr=1e-3)  # made per step
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()


FOUND = [
    (adam_in_the_loop, adam_in_the_loop, "Adam", "exp_avg"),
    (momentum_in_a_step_function, _momentum_step, "SGD", "momentum_buffer"),
    (adamw_param_groups_in_the_loop, adamw_param_groups_in_the_loop, "AdamW", "exp_avg_sq"),
]


@pytest.mark.parametrize("device_name", ["cpu", "accel"])
@pytest.mark.parametrize(
    ("program", "where", "kind", "state"), FOUND, ids=[p[0].__name__ for p in FOUND]
)
def test_an_optimizer_made_again_after_each_step_is_found_where_it_is_made(
    program: Callable[[torch.device], None],
    where: Callable[..., Any],
    kind: str,
    state: str,
    device_name: str,
) -> None:
    device = accelerator_device() if device_name == "accel" else torch.device("cpu")
    findings = _findings(program, device)
    line = _line_of(where, "# made per step")
    assert {f.line for f in findings} == {line}
    message = findings[0].message
    assert f"the {kind} this line made before" in message
    assert state in message and "starts over each time" in message
    assert message.endswith("Make the optimizer once, before the training loop.")


def test_the_message_names_the_variable_the_optimizer_replaces() -> None:
    [finding, *_] = _findings(adam_in_the_loop, torch.device("cpu"))
    assert finding.message.startswith(
        "`torch.optim.Adam(model.parameters(), lr=0.1)`: opt is made again at every step"
    )
    assert "for the same 2 parameters, took one step" in finding.message


def sgd_without_momentum_in_the_loop(device: torch.device) -> None:
    model = nn.Linear(4, 1).to(device)
    for x, y in _batches(device):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)  # keeps no state: nothing lost
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()


def adam_per_epoch(device: torch.device) -> None:
    model = nn.Linear(4, 1).to(device)
    for epoch in range(3):  # a learning rate per epoch, by a new optimizer
        opt = torch.optim.Adam(model.parameters(), lr=0.01 / (epoch + 1))
        for x, y in _batches(device):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()


def new_model_per_trial(device: torch.device) -> None:
    for lr in (0.1, 0.01, 0.001):  # a search: each trial trains a model of its own
        model = nn.Linear(4, 1).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        x, y = _batches(device, 1)[0]
        F.mse_loss(model(x), y).backward()
        opt.step()


def maml_copies_per_task(device: torch.device) -> None:
    meta = nn.Linear(4, 1).to(device)
    for x, y in _batches(device):  # each task adapts a copy of the meta-model
        learner = copy.deepcopy(meta)
        inner = torch.optim.SGD(learner.parameters(), lr=0.1, momentum=0.9)
        F.mse_loss(learner(x), y).backward()
        inner.step()


def gan_optimizers_made_once(device: torch.device) -> None:
    generator, critic = nn.Linear(2, 4).to(device), nn.Linear(4, 1).to(device)
    opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.999))
    for real, _ in _batches(device):
        fake = generator(torch.randn(16, 2, device=device))
        opt_d.zero_grad()
        (critic(fake.detach()).mean() - critic(real).mean()).backward()
        opt_d.step()
        opt_g.zero_grad()
        (-critic(fake).mean()).backward()
        opt_g.step()


QUIET = [
    sgd_without_momentum_in_the_loop,
    adam_per_epoch,
    new_model_per_trial,
    maml_copies_per_task,
    gan_optimizers_made_once,
]


@pytest.mark.parametrize("program", QUIET, ids=lambda p: p.__name__)
def test_optimizers_made_again_with_nothing_to_lose_are_not_reported(
    program: Callable[[torch.device], None],
) -> None:
    assert _findings(program, torch.device("cpu")) == []


class _Lookahead(torch.optim.Optimizer):
    """An optimizer that builds its inner one in its own ``__init__`` (as Lookahead and
    ZeroRedundancyOptimizer do): two optimizers made at the user's one line."""

    def __init__(self, params: Any) -> None:
        params = list(params)
        super().__init__(params, {"lr": 0.1})
        self.inner = torch.optim.Adam(params, lr=0.1)

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        return self.inner.step(closure)


def test_an_optimizer_wrapping_another_made_once_is_not_reported() -> None:
    model = nn.Linear(4, 1)
    with tensor_dap.watch(rules=[RULE]) as watch:
        opt = _Lookahead(model.parameters())
        for x, y in _batches(torch.device("cpu")):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
    assert watch.findings == []


def test_an_optimizer_is_made_as_without_the_watch() -> None:
    """The wrapped ``__init__`` keeps what optimizers are: their signature, their errors, and
    ``__init__`` itself once no watch runs and it is given back."""
    signature = inspect.signature(torch.optim.Optimizer.__init__)
    with tensor_dap.watch(rules=[RULE]):
        assert inspect.signature(torch.optim.Optimizer.__init__) == signature
        with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
            torch.optim.Adam([], lr=0.1)
        opt = torch.optim.Adam(nn.Linear(2, 2).parameters())
        assert copy.deepcopy(opt).state_dict()["param_groups"] == opt.state_dict()["param_groups"]
    assert optimizers.release()
    assert "__tensor_dap_wraps__" not in vars(torch.optim.Optimizer.__init__)
