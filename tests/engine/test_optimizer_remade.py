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


def _make_optimizer(net: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.Adam(net.parameters(), lr=2e-4, betas=(0.5, 0.999))  # made per step


def _gan_step(generator: nn.Module, critic: nn.Module, opt_g: Any, opt_d: Any, real: Any) -> None:
    """One WGAN-style step: the critic on a detached fake, then the generator."""
    fake = generator(torch.randn(16, 2, device=real.device))
    opt_d.zero_grad()
    (critic(fake.detach()).mean() - critic(real).mean()).backward()
    opt_d.step()
    opt_g.zero_grad()
    (-critic(fake).mean()).backward()
    opt_g.step()


def gan_optimizers_from_one_helper(device: torch.device) -> None:
    generator, critic = nn.Linear(2, 4).to(device), nn.Linear(4, 1).to(device)
    for real, _ in _batches(device):
        opt_d, opt_g = _make_optimizer(critic), _make_optimizer(generator)
        _gan_step(generator, critic, opt_g, opt_d, real)


def optimizer_per_micro_batch(device: torch.device) -> None:
    model = nn.Linear(4, 1).to(device)
    for i, (x, y) in enumerate(_batches(device, 8)):
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)  # made per step
        (F.mse_loss(model(x), y) / 2).backward()
        if i % 2 == 1:  # two micro-batches a step: the first one's optimizer never steps
            optimizer.step()
            optimizer.zero_grad()


class _ProjectAdam(torch.optim.Adam):
    """A project's own optimizer class: its ``super().__init__`` is user code too."""

    def __init__(self, params: Any, lr: float = 1e-3) -> None:
        super().__init__(params, lr=lr, betas=(0.9, 0.98))


def project_optimizer_class_in_the_loop(device: torch.device) -> None:
    model = nn.Linear(4, 1).to(device)
    for x, y in _batches(device):
        optimizer = _ProjectAdam(model.parameters())  # made per step
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()


FOUND = [
    (adam_in_the_loop, adam_in_the_loop, "Adam", "exp_avg"),
    (momentum_in_a_step_function, _momentum_step, "SGD", "momentum_buffer"),
    (adamw_param_groups_in_the_loop, adamw_param_groups_in_the_loop, "AdamW", "exp_avg_sq"),
    (gan_optimizers_from_one_helper, _make_optimizer, "Adam", "exp_avg"),
    (optimizer_per_micro_batch, optimizer_per_micro_batch, "Adam", "exp_avg"),
    (
        project_optimizer_class_in_the_loop,
        project_optimizer_class_in_the_loop,
        "_ProjectAdam",
        "step",
    ),
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
    assert state in message and f"is a new {kind}'s first" in message
    if program is gan_optimizers_from_one_helper:  # (the helper's call is the line to move)
        call = _line_of(program, "_make_optimizer(critic)")
        assert message.endswith(
            f"It is made in _make_optimizer(), which test_optimizer_remade.py:{call} `opt_d, "
            "opt_g = _make_optimizer(critic), _make_optimizer(generator)` calls at every step: "
            "call it once, before the training loop, and keep what it returns."
        ), message
    else:
        assert message.endswith("Make the optimizer once, before the training loop.")


def test_the_message_names_the_variable_the_optimizer_replaces() -> None:
    [finding, *_] = _findings(adam_in_the_loop, torch.device("cpu"))
    assert finding.message.startswith(
        "`opt = torch.optim.Adam(model.parameters(), lr=0.1)`: `opt` is made again at every step"
    )
    assert "for the same 2 parameters, took one step" in finding.message
    step_line = _line_of(adam_in_the_loop, "opt.step()")
    assert f"every step (step() at test_optimizer_remade.py:{step_line})" in finding.message


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
        _gan_step(generator, critic, opt_g, opt_d, real)


def adam_given_the_saved_state_each_time(device: torch.device) -> None:
    """A look-ahead over learning rates: each candidate's new Adam is given the Adam state
    kept so far (``load_state_dict``): nothing starts over."""
    model = nn.Linear(4, 1).to(device)
    saved = torch.optim.Adam(model.parameters()).state_dict()
    for x, y in _batches(device):
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        opt.load_state_dict(saved)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        saved = opt.state_dict()


def _one_step_of_a_copy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    probe = copy.deepcopy(model)  # (freed on return: the next copy's parameters may reuse ids)
    opt = torch.optim.Adam(probe.parameters(), lr=0.1)
    F.mse_loss(probe(x), y).backward()
    opt.step()
    return F.mse_loss(probe(x), y).item()


def one_step_sensitivity_of_copies(device: torch.device) -> None:
    model = nn.Linear(4, 1).to(device)
    for x, y in _batches(device, 8):
        _one_step_of_a_copy(model, x, y)


def _fit_temperature(logits: torch.Tensor, labels: torch.Tensor, temperature: torch.Tensor) -> None:
    optimizer = torch.optim.LBFGS([temperature], lr=0.01, max_iter=20)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(logits / temperature, labels)
        loss.backward()
        return loss

    optimizer.step(closure)


def lbfgs_fit_per_epoch(device: torch.device) -> None:
    """Temperature scaling re-fitted each epoch: one ``step(closure)`` of LBFGS is a whole fit
    of ``max_iter`` iterations."""
    logits, labels = torch.randn(64, 3, device=device), torch.randint(0, 3, (64,), device=device)
    temperature = torch.ones(1, device=device, requires_grad=True)
    for _ in range(3):
        _fit_temperature(logits, labels, temperature)


QUIET = [
    adam_given_the_saved_state_each_time,
    one_step_sensitivity_of_copies,
    lbfgs_fit_per_epoch,
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


def sgd_momentum_remade_for_a_poly_schedule(device: torch.device) -> None:
    """A segmentation loop's poly learning rate applied by making SGD with momentum again at
    each iteration (a helper's program): each new one loses the momentum."""
    model = nn.Linear(4, 1).to(device)
    batches = _batches(device)
    for it, (x, y) in enumerate(batches):
        lr = 0.01 * (1 - it / len(batches)) ** 0.9
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)  # made per step
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()


def test_an_optimizer_made_again_for_a_new_learning_rate_is_told_how_to_set_the_rate() -> None:
    """ "Make the optimizer once" alone would drop the schedule the program made it again for:
    when the learning rate differs from the one made before, the message says how to change it
    on the one optimizer. Made again with the same rate (adam_in_the_loop), it says nothing of
    the rate."""
    [finding] = _findings(sgd_momentum_remade_for_a_poly_schedule, torch.device("cpu"))
    assert finding.line == _line_of(sgd_momentum_remade_for_a_poly_schedule, "# made per step")
    assert finding.message.endswith(
        "Make the optimizer once, before the training loop. Its learning rate changes from one "
        "to the next: keep the one optimizer and set `optimizer.param_groups[i]['lr']` (or use "
        "a scheduler of torch.optim.lr_scheduler), which keeps its state."
    ), finding.message
    [same_rate, *_] = _findings(adam_in_the_loop, torch.device("cpu"))
    assert "learning rate" not in same_rate.message
