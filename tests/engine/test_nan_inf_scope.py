"""``nan-inf`` judges what ops compute, never uninitialised memory (``torch.empty`` may hold
NaN garbage until written)."""

from __future__ import annotations

import torch

from tensor_dap.agent.op_kinds import classify
from tensor_dap.agent.rules import nan_inf


def test_uninitialised_factories_are_not_judged() -> None:
    for func in (torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty):
        assert not nan_inf.applies(classify(func)), func


def test_computing_ops_are_judged() -> None:
    for func in (torch.log, torch.Tensor.div, torch.zeros):
        assert nan_inf.applies(classify(func)), func
