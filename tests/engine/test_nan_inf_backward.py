"""``nan-inf`` finds NaN/Inf born in backward: forward values all finite, a gradient that is not
(sqrt at 0, a norm of a zero vector...). Reported at the forward line that made the graph node,
as ``torch.autograd.detect_anomaly`` does, at a fraction of its cost and nothing when off."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import torch

import tensor_dap
from tensor_dap.agent.rules import nan_inf

TRAIN = """
import torch

torch.manual_seed(0)
model = torch.nn.Linear(3, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4, 3)
x[3] = 0  # a padding row: its distance is exactly 0
for step in range(STEPS):
    a = model(x if step >= BAD_FROM else x + 1)
    b = model(torch.zeros(4, 3))
    d = torch.sqrt((a - b).pow(2).sum(-1))
    loss = d.mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(bool(model.weight.isnan().any()))
"""


def write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).lstrip())
    return path


def test_a_gradient_born_infinite_is_reported_at_its_forward_line(
    tmp_path: Path, check, engine_path
) -> None:
    script = write(tmp_path, "train.py", TRAIN.replace("STEPS", "3").replace("BAD_FROM", "0"))
    run = check(script, rules="nan-inf", env=engine_path)
    assert run.stdout.strip() == "True"  # the program is unchanged: its weights do go NaN
    assert run.pairs() == {("nan-inf", 11)}, run.stderr
    message = run.finding("nan-inf")["message"]
    assert message.startswith(
        "`d = torch.sqrt((a - b).pow(2).sum(-1))`: the gradient computed by SqrtBackward0 "
        "(backward of sqrt at train.py:11, run by `loss.backward()` at train.py:14) has 0 NaN and "
        "1 Inf values though its incoming gradient and forward values were finite"
    ), message
    assert "add an eps inside it" in message
    assert run.returncode == 1


def test_a_gradient_born_infinite_at_every_step_stays_at_its_forward_line(
    tmp_path: Path, check
) -> None:
    """A program that skips the steps whose gradients are not finite makes the same bad
    gradient at every step. Past the first runs of the line the engine no longer records it,
    but the same node kind from the same backward() line is the same bug: every report names
    the forward line."""
    skipping = TRAIN.replace("STEPS", "12").replace("BAD_FROM", "0")
    skipping = skipping.replace(
        "    opt.step()\n",
        "    if all(bool(p.grad.isfinite().all()) for p in model.parameters()):\n"
        "        opt.step()\n",
    )
    script = write(tmp_path, "every.py", skipping)
    run = check(script, rules="nan-inf")
    assert run.stdout.strip() == "False"  # every step skipped: the weights stay finite
    assert run.pairs() == {("nan-inf", 11)}, run.stderr


def test_a_node_of_an_unsampled_op_is_reported_at_the_backward_line(tmp_path: Path, check) -> None:
    """Past a call site's first runs the engine stamps one node in 64 with its line; the others
    are reported at the ``backward()`` that ran them, by name."""
    script = write(tmp_path, "late.py", TRAIN.replace("STEPS", "12").replace("BAD_FROM", "10"))
    run = check(script, rules="nan-inf")
    assert run.pairs() == {("nan-inf", 14)}, run.stderr
    message = run.finding("nan-inf")["message"]
    assert message.startswith("`loss.backward()`: the gradient computed by SqrtBackward0 (created")
    assert "whose line was not recorded" in message


def test_nan_made_in_forward_is_not_reported_again_in_backward(tmp_path: Path, check) -> None:
    script = write(
        tmp_path,
        "forward_nan.py",
        """
        import torch
        w = torch.ones(3, requires_grad=True)
        x = torch.tensor([1.0, -1.0, 2.0])
        y = torch.log(x)
        loss = (y * w).sum()
        loss.backward()
        (g,) = torch.autograd.grad((torch.sqrt(w - 1) * 2).sum(), w)
        """,
    )
    run = check(script, rules="nan-inf")
    # log made the NaN (line 4); its gradient into w is passed along, not born in backward.
    # autograd.grad is hooked too: sqrt at 0 in line 7.
    assert run.pairs() == {("nan-inf", 4), ("nan-inf", 7)}, run.stderr
    by_line = {f["line"]: f["message"] for f in run.findings}
    assert "SqrtBackward0" in by_line[7] and "torch.autograd.grad" in by_line[7]


def test_nothing_is_hooked_when_the_rule_is_off_and_nothing_stays_after_backward() -> None:
    a = torch.zeros(4, requires_grad=True)
    with tensor_dap.watch(rules="default") as off:
        torch.sqrt(a).sum().backward()
    plan = off._plans[torch.Tensor.backward]
    assert all(rule != "nan-inf" for rule, *_ in plan[1] + plan[2])
    assert nan_inf._SESSIONS not in off.rule_state and off.findings == []

    with tensor_dap.watch(rules=["nan-inf"]) as on:
        d = torch.sqrt(a)
        sqrt_line = sys._getframe().f_lineno - 1
        d.sum().backward(retain_graph=True)
        assert on.rule_state[nan_inf._SESSIONS] == {}  # its hooks were removed
        a.grad = None
        d.sum().backward()  # a retained graph: hooked again, the same line (counted, deduped)
    assert [f.line for f in on.findings] == [sqrt_line]
    assert on.counts[("nan-inf", on.findings[0].path, sqrt_line)] == 2
