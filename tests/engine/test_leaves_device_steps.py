"""``leaves-device`` reports a line that copies to the host at every training step, and leaves
alone the copies its own message recommends: once after a loop, once an epoch, per batch of an
evaluation or a generation with no ``backward()`` in between, and one-number reads."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tensor_dap
from tensor_dap.testing import accelerator_device


def _line(function: Any, text: str) -> int:
    lines, first = inspect.getsourcelines(function)
    return next(first + i for i, line in enumerate(lines) if text in line)


def _setup() -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    device = accelerator_device()
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 6, device=device)
    y = torch.randint(0, 3, (32,), device=device)
    return model, optimizer, x, y


def _leaves(watch: Any) -> list[Any]:
    return [f for f in watch.findings if f.rule == "leaves-device"]


def test_a_copy_at_every_training_step_is_reported_at_its_line(engine_path) -> None:  # noqa: ANN001
    model, optimizer, x, y = _setup()
    preds = []
    with tensor_dap.watch(rules=["leaves-device"]) as watch:
        for i in range(0, 32, 8):
            optimizer.zero_grad()
            out = model(x[i : i + 8])
            F.cross_entropy(out, y[i : i + 8]).backward()
            optimizer.step()
            preds.append(out.detach().cpu())
    (finding,) = _leaves(watch)
    here = test_a_copy_at_every_training_step_is_reported_at_its_line
    assert finding.line == _line(here, "preds.append(out.detach().cpu())")
    assert "`out.detach().cpu()`" in finding.message
    assert "at every training step" in finding.message
    assert "copy once after the loop" in finding.message
    assert len(preds) == 4


def test_copies_after_loops_per_epoch_and_in_evaluation_are_not_reported(engine_path) -> None:  # noqa: ANN001
    model, optimizer, x, y = _setup()
    with tensor_dap.watch(rules=["leaves-device"]) as watch:
        for _epoch in range(3):
            model.train()
            for i in range(0, 32, 4):  # 8 steps an epoch
                optimizer.zero_grad()
                F.cross_entropy(model(x[i : i + 4]), y[i : i + 4]).backward()
                optimizer.step()
            weights = model[0].weight.detach().cpu()  # once an epoch, for a plot
            model.eval()
            probs = []
            with torch.no_grad():
                for i in range(0, 32, 8):
                    probs.append(model(x[i : i + 8]).softmax(-1).cpu())  # per eval batch
            all_probs = torch.cat(probs).numpy()  # once after the evaluation
            assert all_probs.shape == (32, 3) and weights.shape == (8, 6)
        tokens = torch.zeros(1, 1, dtype=torch.long, device=x.device)
        with torch.no_grad():
            for _ in range(5):  # generation: one token a step, listed once at the end
                nxt = model(x[:1]).argmax(-1, keepdim=True)
                tokens = torch.cat([tokens, nxt], dim=1)
        text = tokens[0].tolist()
    assert len(text) == 6
    assert _leaves(watch) == []


def test_one_number_copies_are_scalar_reads(engine_path) -> None:  # noqa: ANN001
    """``loss.cpu().numpy()`` each step is ``loss.item()``: reported with ``scalars`` only."""
    model, optimizer, x, y = _setup()

    def train(options: dict[str, dict[str, Any]]) -> list[Any]:
        losses = []
        with tensor_dap.watch(rules=["leaves-device"], options=options) as watch:
            for i in range(0, 32, 8):
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x[i : i + 8]), y[i : i + 8])
                loss.backward()
                optimizer.step()
                losses.append(loss.detach().cpu().numpy())
        assert len(losses) == 4
        return _leaves(watch)

    assert train({}) == []
    (finding,) = train({"leaves-device": {"scalars": True}})
    assert finding.line == _line(train, "losses.append(loss.detach().cpu().numpy())")
    # where the loss was made, not "by detach": the copy is the loss's
    made = _line(train, "loss = F.cross_entropy(")
    assert (
        f"(created at test_leaves_device_steps.py:{made} by cross_entropy, detached at "
        f"test_leaves_device_steps.py:{finding.line})"
    ) in finding.message


def test_a_gan_step_with_two_backwards_and_a_pinned_copy(engine_path) -> None:  # noqa: ANN001
    """A GAN's iteration runs two backward() calls (D, then G); the copy into a pinned host
    buffer it makes each iteration runs at every step."""
    torch.manual_seed(0)
    device = accelerator_device()
    netG, netD = nn.Linear(4, 6).to(device), nn.Linear(6, 1).to(device)
    optD = torch.optim.Adam(netD.parameters(), lr=1e-3)
    optG = torch.optim.Adam(netG.parameters(), lr=1e-3)
    real = torch.randn(8, 6, device=device)
    samples = torch.empty(8, 6)
    with tensor_dap.watch(rules=["leaves-device"]) as watch:
        for _ in range(3):
            fake = netG(torch.randn(8, 4, device=device))
            optD.zero_grad()
            d_loss = F.softplus(-netD(real)).mean() + F.softplus(netD(fake.detach())).mean()
            d_loss.backward()
            optD.step()
            optG.zero_grad()
            F.softplus(-netD(fake)).mean().backward()
            optG.step()
            samples.copy_(fake.detach())
    (finding,) = _leaves(watch)
    here = test_a_gan_step_with_two_backwards_and_a_pinned_copy
    assert finding.line == _line(here, "samples.copy_(fake.detach())")
    assert "copy_ moves fake.detach()" in finding.message or "copy_ moves" in finding.message


@pytest.mark.parametrize("steps_between", [1, 3])
def test_a_copy_every_few_accumulated_micro_batches_is_every_step(
    engine_path,
    steps_between: int,  # noqa: ANN001
) -> None:
    model, optimizer, x, y = _setup()
    with tensor_dap.watch(rules=["leaves-device"]) as watch:
        for step in range(4):
            for micro in range(steps_between):
                j = (step * steps_between + micro) % 4 * 8
                (F.cross_entropy(model(x[j : j + 8]), y[j : j + 8]) / steps_between).backward()
            optimizer.step()
            optimizer.zero_grad()
            snapshot = model[2].weight.detach().cpu()
    assert snapshot.shape == (3, 8)
    assert [f.line for f in _leaves(watch)] == [
        _line(test_a_copy_every_few_accumulated_micro_batches_is_every_step, "snapshot = ")
    ]


def test_an_evaluation_after_a_short_epoch_and_a_rollout_are_not_reported() -> None:
    """Three training steps an epoch, then a validation loop copying each batch's outputs for
    NumPy metrics; an A2C-style rollout handing each action to the environment, one update
    per rollout. The copies run twice with no backward() between: loops of batches."""
    model, optimizer, x, y = _setup()
    with tensor_dap.watch(rules=["leaves-device"]) as watch:
        for _ in range(3):
            for i in range(0, 24, 8):
                optimizer.zero_grad()
                F.cross_entropy(model(x[i : i + 8]), y[i : i + 8]).backward()
                optimizer.step()
            probs = []
            with torch.no_grad():
                for i in range(24, 32, 4):
                    probs.append(model(x[i : i + 4]).softmax(-1).cpu().numpy())
        for _ in range(3):
            log_probs = []
            for _ in range(4):
                dist = torch.distributions.Categorical(logits=model(x[:1]))
                action = dist.sample()
                action.cpu().numpy()  # the environment takes it on the host
                log_probs.append(dist.log_prob(action))
            optimizer.zero_grad()
            (-torch.stack(log_probs).sum()).backward()
            optimizer.step()
    assert _leaves(watch) == []


def _to_numpy(t: torch.Tensor) -> Any:
    return t.detach().cpu().numpy()


def test_two_copies_on_one_line_and_a_helper_copying_for_two_lines_are_every_step() -> None:
    """A ratio of two copied statistics on one line, or one ``to_numpy`` helper called from
    two lines of the step: two copies a step with no backward() between them are not a loop
    of batches. The same helper in an evaluation's batch loop is still quiet."""
    model, optimizer, x, y = _setup()
    ratios, stats = [], []
    with tensor_dap.watch(rules=["leaves-device"]) as watch:
        for i in range(0, 32, 8):
            optimizer.zero_grad()
            out = model(x[i : i + 8])
            F.cross_entropy(out, y[i : i + 8]).backward()
            optimizer.step()
            ratios.append(abs(out.detach().cpu().numpy()).mean() / abs(x.cpu().numpy()).mean())
            stats.append(_to_numpy(out).mean())
            stats.append(_to_numpy(model[0].weight).std())
        with torch.no_grad():
            outputs = [_to_numpy(model(x[i : i + 4])) for i in range(0, 32, 4)]
    here = test_two_copies_on_one_line_and_a_helper_copying_for_two_lines_are_every_step
    lines = sorted({f.line for f in _leaves(watch)})
    # (the helper's copy is reported at its own line, as any copy in user code is)
    assert lines == [_line(_to_numpy, "t.detach().cpu()"), _line(here, "ratios.append(")]
    assert len(outputs) == 8


def test_an_agents_action_for_its_environment_is_a_scalar_read() -> None:
    """TD3's ``select_action``: one ``(1, action_dim)`` action a step copied for a NumPy
    environment, one update per environment step. The copy cannot leave the loop (the next
    step needs it): reported with ``scalars`` only; a batch's outputs still are."""
    model, optimizer, x, y = _setup()

    def train(options: dict[str, dict[str, Any]]) -> list[Any]:
        state = x[:1]
        with tensor_dap.watch(rules=["leaves-device"], options=options) as watch:
            for _ in range(6):
                action = model(state).detach().cpu().numpy().flatten()  # select_action
                state = state + torch.as_tensor(action.sum(), device=x.device)  # env.step
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()  # agent.train(replay_buffer)
                optimizer.step()
        return _leaves(watch)

    assert train({}) == []
    (finding,) = train({"leaves-device": {"scalars": True}})
    assert finding.line == _line(train, "action = model(state).detach().cpu()")


def labels_copied_back_for_a_metric(device: torch.device) -> list[int]:
    """Labels moved to the device for the loss, then copied back each step for an F1 score
    computed after the epoch: the CPU labels the program sliced are still there."""
    torch.manual_seed(0)
    model = nn.Linear(6, 3).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    X, y = torch.randn(32, 6), torch.randint(0, 3, (32,))
    all_labels: list[int] = []
    for i in range(0, 32, 8):
        xb, yb = X[i : i + 8].to(device), y[i : i + 8].to(device)
        loss = F.cross_entropy(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        all_labels.extend(yb.cpu().tolist())
    return all_labels


def test_a_device_copy_copied_back_is_told_to_read_its_cpu_original(engine_path) -> None:  # noqa: ANN001
    with tensor_dap.watch(rules=["leaves-device"]) as watch:
        labels = labels_copied_back_for_a_metric(accelerator_device())
    assert len(labels) == 32
    (finding,) = _leaves(watch)
    assert finding.line == _line(labels_copied_back_for_a_metric, "all_labels.extend(yb.cpu()")
    assert finding.message.endswith(
        "yb is a copy of `y[i:i + 8]`, which is on the CPU: use `y[i:i + 8]` there in place of "
        "copying yb back."
    ), finding.message


def test_a_copy_of_a_device_tensor_is_not_told_of_a_cpu_original(engine_path) -> None:  # noqa: ANN001
    """``yb = y[i:i + 8].to(device)`` of labels already on the device: no CPU original."""
    model, optimizer, x, y = _setup()
    with tensor_dap.watch(rules=["leaves-device"]) as watch:
        for i in range(0, 32, 8):
            yb = y[i : i + 8].to(x.device, torch.int64)
            optimizer.zero_grad()
            F.cross_entropy(model(x[i : i + 8]), yb).backward()
            optimizer.step()
            yb.cpu()
    (finding,) = _leaves(watch)
    assert "is a copy of" not in finding.message
    assert finding.message.endswith("copy once after the loop."), finding.message
