"""``graph-kept`` says why ``backward()`` raised "Trying to backward through the graph a second
time": the hidden state (or total) carried into this iteration with the previous iteration's
graph, at the line that carries it. The program raises PyTorch's own error as it does
unwatched; a hidden state detached between windows raises nothing and is not reported."""

from __future__ import annotations

import inspect
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap


def lstm_windows_without_detach() -> None:
    torch.manual_seed(0)
    embed, lstm, head = nn.Embedding(12, 6), nn.LSTM(6, 8, batch_first=True), nn.Linear(8, 12)
    params = [*embed.parameters(), *lstm.parameters(), *head.parameters()]
    optimizer = torch.optim.Adam(params, lr=1e-2)
    stream = torch.randint(0, 12, (2, 41))
    hidden = (torch.zeros(1, 2, 8), torch.zeros(1, 2, 8))
    for i in range(0, 30, 10):
        x, y = stream[:, i : i + 10], stream[:, i + 1 : i + 11]
        out, hidden = lstm(embed(x), hidden)  # carried
        loss = F.cross_entropy(head(out).reshape(-1, 12), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def gru_windows_without_detach() -> None:
    torch.manual_seed(0)
    gru, head = nn.GRU(3, 5), nn.Linear(5, 1)
    h = torch.zeros(1, 4, 5)
    for _ in range(3):
        out, h = gru(torch.randn(6, 4, 3), h)  # carried
        head(out).pow(2).mean().backward()


def total_backpropagated_each_iteration() -> None:
    w = torch.randn(3, requires_grad=True)
    total = torch.zeros(())
    for _ in range(3):
        loss = (w * torch.randn(3)).sum().pow(2)
        total = total + loss  # carried
        total.backward()


def memory_kept_by_a_module() -> None:
    """A module keeps a running memory of its inputs as an attribute, with their graphs."""

    class Memory(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc = nn.Linear(4, 4)
            self.register_buffer("memory", torch.zeros(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.tanh(self.enc(x))
            out = h + self.memory
            self.memory = self.memory + h.mean(0)  # carried
            return out

    torch.manual_seed(0)
    model = Memory()
    for _ in range(3):
        model(torch.randn(8, 4)).pow(2).mean().backward()


def generator_output_backpropagated_twice() -> None:
    """A GAN's discriminator step on ``fake`` without ``detach()``, then the generator's."""
    torch.manual_seed(0)
    generator, discriminator = nn.Sequential(nn.Linear(2, 3), nn.Tanh()), nn.Linear(3, 1)
    fake = generator(torch.randn(4, 2))
    discriminator(fake).mean().backward()
    (-discriminator(fake).mean()).backward()  # reused


def total_backpropagated_by_autograd_backward() -> None:
    w = torch.randn(3, requires_grad=True)
    total = torch.zeros(())
    for _ in range(3):
        total = total + (w * torch.randn(3)).sum().pow(2)  # carried
        torch.autograd.backward([total])


def lstm_windows_detached() -> None:
    torch.manual_seed(0)
    lstm = nn.LSTM(4, 8)
    hidden = (torch.zeros(1, 2, 8), torch.zeros(1, 2, 8))
    for _ in range(3):
        hidden = tuple(h.detach() for h in hidden)
        out, hidden = lstm(torch.randn(5, 2, 4), hidden)
        out.pow(2).mean().backward()


def _run(program: Callable[[], None], watched: bool) -> tuple[str, list[tuple[int, str]]]:
    """PyTorch's error (``""`` when none) and the findings."""
    found: list[tuple[int, str]] = []
    try:
        if watched:
            with tensor_dap.watch(rules=["graph-kept"]) as watch:
                try:
                    program()
                finally:
                    found = [(f.line, f.message) for f in watch.findings]
        else:
            program()
    except RuntimeError as error:
        return str(error), found
    return "", found


def _marked(program: Callable[[], None], marker: str = "# carried") -> int:
    lines, start = inspect.getsourcelines(program)
    return next(start + i for i, text in enumerate(lines) if text.rstrip().endswith(marker))


@pytest.mark.parametrize(
    "program, fix",
    [
        (lstm_windows_without_detach, "`hidden = tuple(h.detach() for h in hidden)`"),
        (gru_windows_without_detach, "`h = h.detach()`"),
        (total_backpropagated_each_iteration, "`total = total.detach()`"),
        (memory_kept_by_a_module, "`self.memory = self.memory.detach()`"),
        (total_backpropagated_by_autograd_backward, "`total = total.detach()`"),
    ],
    ids=lambda p: getattr(p, "__name__", ""),
)
def test_the_carried_tensor_is_named_at_the_line_carrying_it(program, fix: str) -> None:  # noqa: ANN001
    plain_error, _ = _run(program, watched=False)
    error, found = _run(program, watched=True)
    assert "backward through the graph a second time" in plain_error
    assert error == plain_error
    ((line, message),) = found
    assert line == _marked(program)
    name = fix.strip("`").split(" = ")[0]
    assert f"{name} carries the autograd graph of an earlier iteration into this one" in message
    assert "fails with 'Trying to backward through the graph a second time'" in message
    assert f"Detach it before it goes in again ({fix})" in message


def test_a_hidden_state_detached_between_windows_is_not_reported() -> None:
    assert _run(lstm_windows_detached, watched=True) == ("", [])


def test_a_graph_backpropagated_twice_in_one_iteration_names_its_tensor() -> None:
    plain_error, _ = _run(generator_output_backpropagated_twice, watched=False)
    error, found = _run(generator_output_backpropagated_twice, watched=True)
    assert error == plain_error and "second time" in error
    ((line, message),) = found
    assert line == _marked(generator_output_backpropagated_twice, "# reused")
    assert "this backward() goes through fake (made at test_carried_graph.py:" in message
    assert "use `fake.detach()`" in message


def pinn_second_derivative_without_a_graph() -> None:
    """A PINN's heat-equation residual ``u_t - k * u_xx`` whose ``u_xx`` is taken without
    ``create_graph=True``: that grad frees the network's graph, which the loss's backward()
    needs for ``u_t``."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
    x = torch.rand(32, 1, requires_grad=True)
    t = torch.rand(32, 1, requires_grad=True)
    u = net(torch.cat([x, t], dim=1))
    u_x, u_t = torch.autograd.grad(u, (x, t), torch.ones_like(u), create_graph=True)
    u_xx = torch.autograd.grad(u_x, x, grad_outputs=torch.ones_like(u_x))[0]  # freed
    (u_t - 0.1 * u_xx).pow(2).mean().backward()


def pinn_second_derivative_with_a_graph() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
    x = torch.rand(32, 1, requires_grad=True)
    t = torch.rand(32, 1, requires_grad=True)
    u = net(torch.cat([x, t], dim=1))
    u_x, u_t = torch.autograd.grad(u, (x, t), torch.ones_like(u), create_graph=True)
    u_xx = torch.autograd.grad(u_x, x, torch.ones_like(u_x), True, True)[0]
    (u_t - 0.1 * u_xx).pow(2).mean().backward()


def gradient_norm_read_before_backward() -> None:
    """The gradients' norm read before ``backward()`` by a grad that frees the graph."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    loss = model(torch.randn(8, 4)).pow(2).mean()
    grads = torch.autograd.grad(loss, list(model.parameters()))  # freed
    print(float(sum(g.norm() for g in grads)))
    loss.backward()


@pytest.mark.parametrize(
    "program", [pinn_second_derivative_without_a_graph, gradient_norm_read_before_backward]
)
def test_a_graph_freed_by_autograd_grad_is_named_at_the_grad(program) -> None:  # noqa: ANN001
    """Not a tensor carried over nor a GAN's reused output: a ``torch.autograd.grad`` without
    ``create_graph`` or ``retain_graph`` freed the graph; the finding is at that call and says
    which flag fixes what."""
    plain_error, _ = _run(program, watched=False)
    error, found = _run(program, watched=True)
    assert "second time" in plain_error and error == plain_error
    ((line, message),) = found
    assert line == _marked(program, "# freed")
    assert message.startswith("`")
    assert "`: torch.autograd.grad here went through the graph that backward() at " in message
    assert "it ran without create_graph=True or retain_graph=True" in message
    assert "pass create_graph=True there" in message and "pass retain_graph=True." in message
    assert _run(pinn_second_derivative_with_a_graph, watched=True) == ("", [])
