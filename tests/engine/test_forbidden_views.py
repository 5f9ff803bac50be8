"""A tensor whose ``grad_fn`` PyTorch refuses to read: the result of an in-place op on a view made
under ``no_grad`` of a tensor that requires grad. ``nn.Embedding(padding_idx=...)`` makes one as
it initialises itself (``with torch.no_grad(): self.weight[padding_idx].fill_(0)``), so every
model with a padded embedding built under the watch hands one to the rules. No rule may fail on
it, and the engine logs no internal error."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

import tensor_dap
from tensor_dap import catalog


def test_a_padded_embedding_built_and_trained_under_every_rule(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="tensor_dap")
    with tensor_dap.watch(rules=[r.id for r in catalog.RULES], memory=True) as watch:
        torch.manual_seed(0)
        embedding = nn.Embedding(20, 8, padding_idx=0)
        head = nn.Linear(8, 2)
        weight = nn.Parameter(torch.randn(4, 4))
        with torch.no_grad():
            row = weight[0]
            row.fill_(1.0)
            row.add_(1.0)  # a second in-place op on it: in-place-saved looks at its history
        optimizer = torch.optim.SGD([*embedding.parameters(), *head.parameters()], lr=0.1)
        total = torch.zeros(())
        for _ in range(4):
            loss = head(embedding(torch.randint(0, 20, (5, 3))).mean(1)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.detach()
    assert watch.failed == {}
    assert [f.rule for f in watch.findings] == []
    assert not [r.getMessage() for r in caplog.records if "internal error" in r.getMessage()]
