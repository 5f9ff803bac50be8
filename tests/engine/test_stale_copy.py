"""``stale-copy``: a leaf moved or cast after its optimizer was made (``w = w.to(device)``)
leaves the optimizer updating the original while the program computes with a copy that never
changes. Found at the copy's line; a cast made in each forward, a module moved after its
optimizer, a frozen copy and a copy made a leaf of its own stay quiet."""

from __future__ import annotations

import inspect
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.agent import optimizers
from tensor_dap.testing import accelerator_device

pytestmark = pytest.mark.usefixtures("engine_path")


def _target(where: str) -> torch.device:
    return accelerator_device() if where == "accel" else torch.device("cpu")


def moved_after_the_optimizer(where: str) -> list[float]:
    """TransE-style raw embeddings: moved after ``SGD([...])`` took the originals."""
    torch.manual_seed(0)
    device = _target(where)
    emb = torch.randn(10, 4, dtype=torch.float64 if where == "cpu" else None).requires_grad_()
    optimizer = torch.optim.SGD([emb], lr=0.1)
    emb = emb.to(device, torch.float32)  # stale
    losses = []
    for _ in range(3):
        loss = emb[:5].pow(2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def cast_after_the_optimizer(where: str) -> list[float]:
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.Adam([w, b], lr=0.1)
    w = w.double()  # stale
    losses = []
    for _ in range(3):
        x = torch.randn(8, 3, dtype=torch.float64)
        loss = F.mse_loss(x @ w + b.double(), torch.ones(8, dtype=torch.float64))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


class _HalfLinear(nn.Module):
    """Casts its weight in each forward (mixed precision by hand, CPU offload)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.to(x.device, x.dtype).t()


def cast_in_each_forward(where: str) -> None:
    torch.manual_seed(0)
    model = _HalfLinear()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(4, 3, dtype=torch.float64, device=_target(where))
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()


def module_moved_after_the_optimizer(where: str) -> None:
    """``model.to(device)`` moves parameters in place: the optimizer's are the model's."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.to(_target(where)).double()
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(4, 3, dtype=torch.float64, device=_target(where))).sum().backward()
        optimizer.step()


def frozen_copy_and_a_new_leaf(where: str) -> None:
    """A copy of a tensor no optimizer updates, and a copy made a leaf before the optimizer."""
    torch.manual_seed(0)
    frozen = torch.randn(3, requires_grad=True)
    frozen_copy = frozen.to(_target(where))
    w = torch.randn(3, requires_grad=True).to(_target(where)).detach().requires_grad_()
    optimizer = torch.optim.SGD([w], lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        (w * frozen_copy).sum().backward(retain_graph=True)
        optimizer.step()


def copies_in_accumulated_micro_batches(where: str) -> None:
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    optimizer = torch.optim.SGD([w], lr=0.1)
    for step in range(6):
        (w.to(_target(where)) * step).sum().backward()
        if step % 3 == 2:
            optimizer.step()
            optimizer.zero_grad()


def second_loss_through_a_retained_graph(where: str) -> None:
    """Two heads on a shared trunk whose weight is cast in the forward; the first head's
    optimizer steps (the trunk's too) before the second loss backpropagates through the same
    graph: one step between two backward passes of one forward."""
    torch.manual_seed(0)
    trunk = torch.randn(3, 4, requires_grad=True)
    head_a, head_b = torch.randn(4, 1, requires_grad=True), torch.randn(4, 1, requires_grad=True)
    opt_a = torch.optim.SGD([trunk, head_a], lr=0.1)
    opt_b = torch.optim.SGD([trunk, head_b], lr=0.1)
    for _ in range(4):
        x = torch.randn(8, 3, dtype=torch.float64, device=_target(where))
        hidden = x @ trunk.to(x.device, x.dtype)
        opt_a.zero_grad()
        (hidden @ head_a.to(x.device, x.dtype)).pow(2).mean().backward(retain_graph=True)
        opt_a.step()
        opt_b.zero_grad()
        (hidden @ head_b.to(x.device, x.dtype)).pow(2).mean().backward()
        opt_b.step()


def _found(program: Callable[[str], object], where: str) -> list[tuple[int, str]]:
    with tensor_dap.watch(rules=["stale-copy"]) as watch:
        program(where)
    assert not watch.failed
    return [(f.line, f.message) for f in watch.findings]


def _marked(program: Callable[[str], object]) -> int:
    lines, start = inspect.getsourcelines(program)
    return next(start + i for i, text in enumerate(lines) if text.rstrip().endswith("# stale"))


@pytest.mark.parametrize("where", ["cpu", "accel"])
def test_a_leaf_moved_after_its_optimizer_is_found_at_the_move(where: str) -> None:
    ((line, message),) = _found(moved_after_the_optimizer, where)
    assert line == _marked(moved_after_the_optimizer)
    made = "a torch.float32 copy" if where == "cpu" else f"a copy on {_target(where)}"
    assert message.startswith(
        f"`emb = emb.to(device, torch.float32)` makes {made} of a tensor that optimizer "
        "updates (a leaf (10, 4)"
    )
    assert "The program computes with the copy, but optimizer.step() at " in message
    assert "updates the original: the copy, made before those updates, does not follow" in message
    assert "make the copy a leaf of its own: " in message
    assert "`emb = emb.to(device, torch.float32).detach().requires_grad_()`" in message


def test_a_cast_after_the_optimizer_is_found_and_the_loss_is_as_without_the_tool() -> None:
    plain = cast_after_the_optimizer("cpu")
    ((line, message),) = _found(cast_after_the_optimizer, "cpu")
    assert line == _marked(cast_after_the_optimizer)
    assert "`w = w.double()` makes a torch.float64 copy of a tensor that optimizer updates" in (
        message
    )
    assert message.endswith("`w = w.double().detach().requires_grad_()`.")
    assert "Create the tensor with dtype=torch.float64 at test_stale_copy.py:" in message
    assert cast_after_the_optimizer("cpu") == plain


def temperature_scaling(steps: int) -> float:
    """Temperature scaling (Guo et al.'s recipe): LBFGS fits one parameter in a closure, which
    computes with a float64 copy made after the optimizer took the parameter; often in one
    ``step()``, whose closure LBFGS calls while it updates the parameter."""
    logits, labels = torch.randn(64, 5, dtype=torch.float64), torch.randint(0, 5, (64,))
    temperature = nn.Parameter(torch.ones(1) * 1.5)
    optimizer = torch.optim.LBFGS([temperature], lr=0.01, max_iter=5)
    temperature64 = temperature.double()  # stale
    for _ in range(steps):

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = F.cross_entropy(logits / temperature64, labels)
            loss.backward()
            return loss

        optimizer.step(closure)
    return temperature.item()


@pytest.mark.parametrize("steps", [1, 3])
def test_a_copy_an_lbfgs_closure_computes_with_is_found_naming_where_the_original_was_made(
    steps: int,
) -> None:
    ((line, message),) = _found(lambda _: temperature_scaling(steps), "cpu")
    assert line == _marked(temperature_scaling)
    made = _line_of(temperature_scaling, "temperature = nn.Parameter(")
    # (not the line of optimizer.step(closure), where LBFGS's own add_ updates it)
    assert f"requires grad, created at test_stale_copy.py:{made} by " in message
    assert f"Create the tensor with dtype=torch.float64 at test_stale_copy.py:{made}," in message


def _line_of(program: Callable[[str], object], text: str) -> int:
    lines, start = inspect.getsourcelines(program)
    return next(start + i for i, line in enumerate(lines) if text in line)


@pytest.mark.parametrize(
    "program",
    [
        cast_in_each_forward,
        module_moved_after_the_optimizer,
        frozen_copy_and_a_new_leaf,
        copies_in_accumulated_micro_batches,
        second_loss_through_a_retained_graph,
    ],
)
@pytest.mark.parametrize("where", ["cpu", "accel"])
def test_copies_the_optimizer_does_not_outlive_stay_quiet(
    program: Callable[[str], None], where: str
) -> None:
    with tensor_dap.watch(rules=["stale-copy"]) as watch:
        before = len(optimizers._subscribers)
        program(where)
        # (no step pays for the rule until a stale copy was seen)
        assert len(optimizers._subscribers) == before
    assert not watch.failed
    assert watch.findings == []
