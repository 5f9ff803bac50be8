"""The Python API (``tensor_dap.watch``) that the debug adapter uses: findings before the op
runs, in the user's frame; and the program is never disturbed."""

from __future__ import annotations

import gc
import sys
import weakref

import pytest
import torch
from torch import nn

import tensor_dap
from tensor_dap.agent.provenance import Prov, ProvenanceRegistry
from tensor_dap.agent.rules import RULE_IDS, UnknownRuleError, all_rules, parse_rules
from tensor_dap.testing import accelerator_device


def train(steps: int = 5) -> tuple[list[torch.Tensor], list[float]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 6), torch.randint(0, 2, (16,))
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return [p.detach().clone() for p in model.parameters()], losses


def test_same_results_with_and_without_the_engine() -> None:
    plain_params, plain_losses = train()
    with tensor_dap.watch(rules="all") as watch:
        watched_params, watched_losses = train()
    assert watch.findings == []
    assert plain_losses == watched_losses
    assert all(torch.equal(a, b) for a, b in zip(plain_params, watched_params))


def test_no_tensor_kept_alive() -> None:
    with tensor_dap.watch(rules="all"):
        w = torch.randn(100, 100, requires_grad=True)
        h = torch.sigmoid(w @ w)
        loss = (h * 2).sum()
        refs = [weakref.ref(t) for t in (h, loss)]
        loss.backward()
        del h, loss
    gc.collect()
    assert [r() for r in refs] == [None, None]


def test_version_counters_and_requires_grad_untouched() -> None:
    x = torch.randn(4, requires_grad=True)
    data = torch.randn(4)
    with tensor_dap.watch(rules="all"):
        y = x * data
        _ = y + data
        grad_fn_before = y.grad_fn
    assert x._version == 0 and data._version == 0 and y._version == 0
    assert x.requires_grad and not data.requires_grad
    assert y.grad_fn is grad_fn_before and x.grad is None


def test_finding_arrives_before_the_op_in_the_user_frame() -> None:
    seen = []
    accel = accelerator_device()

    def sink(finding, frame) -> None:
        seen.append((finding.rule, frame.f_code.co_name, frame.f_lineno, y.clone()))

    def user_code() -> None:
        nonlocal y, op_line
        y = torch.zeros(3)
        mask = torch.tensor([True, False, True], device=accel)
        src = torch.ones(3, device=accel)
        op_line = sys._getframe().f_lineno + 1
        y.masked_scatter_(mask, src)

    y = None
    op_line = 0
    watch = tensor_dap.watch(rules=["device-mismatch"], on_finding=sink)
    with watch, pytest.raises(RuntimeError, match="same device"):
        user_code()
    rule, function, line, y_before = seen[0]
    assert (rule, function) == ("device-mismatch", "user_code")
    assert torch.equal(y_before, torch.zeros(3))  # the op had not run yet
    assert line == op_line


def test_a_failing_rule_is_switched_off_and_the_program_goes_on(monkeypatch) -> None:
    from tensor_dap.agent.rules import broadcast

    def broken(*args, **kwargs):
        raise ZeroDivisionError("bug in a rule")

    monkeypatch.setattr(broadcast, "before", broken)
    with tensor_dap.watch(rules=["broadcast"]) as watch:
        result = torch.ones(4) - torch.ones(4, 1)
    assert result.shape == (4, 4)
    assert "broadcast" in watch.failed and "bug in a rule" in watch.failed["broadcast"]


def test_rules_can_be_toggled_while_running() -> None:
    with tensor_dap.watch(rules=[]) as watch:
        watch.set_enabled(["broadcast"])
        # nothing was installed for an empty rule set; start() installs on demand
        watch.start()
        _ = torch.ones(4) - torch.ones(4, 1)
    assert [f.rule for f in watch.findings] == ["broadcast"]


def test_nothing_installed_without_rules() -> None:
    with tensor_dap.watch(rules=[]):
        assert not torch._C._is_torch_function_mode_enabled()


def test_provenance_registry_is_bounded_and_weak() -> None:
    registry = ProvenanceRegistry(capacity=100)
    keep = []
    for i in range(1000):
        t = torch.zeros(1)
        registry.record(t, Prov("x.py", i, "zeros"))
        if i % 100 == 0:
            keep.append(t)
    assert len(registry) <= 100
    last = torch.zeros(1)
    registry.record(last, Prov("x.py", 5000, "zeros"))
    assert registry.lookup(last).line == 5000
    assert registry.lookup(torch.zeros(1)) is None


def test_parse_rules() -> None:
    defaults = parse_rules("default")
    assert "nan-inf" not in defaults and "memory-limit" not in defaults
    assert len(defaults) == len(RULE_IDS) - 2 and "out-of-memory" in defaults
    assert parse_rules("all") == list(RULE_IDS)
    assert parse_rules("broadcast, grad-lost") == ["broadcast", "grad-lost"]
    with pytest.raises(UnknownRuleError, match="unknown rule 'nope'"):
        parse_rules("nope")
    assert [r.id for r in all_rules()] == list(RULE_IDS)


def test_a_list_of_rules_reads_as_the_comma_list_does() -> None:
    """``rules=["default", "nan-inf"]`` as ``"default,nan-inf"``; a misspelt id is a clear
    error naming the known ones (it was a bare KeyError)."""
    with tensor_dap.watch(rules=["default", "nan-inf"]) as watch:
        pass
    assert watch.enabled == set(parse_rules("default,nan-inf"))
    with pytest.raises(UnknownRuleError, match="unknown rule 'graph_kept'; known rules: "):
        tensor_dap.watch(rules=["graph_kept"])
