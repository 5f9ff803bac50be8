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


def test_the_tensors_of_a_finding_are_named_as_the_line_names_them() -> None:
    """The report's tensors: the operands by their text, the result by the variable it is
    assigned to, or by its expression inside a larger one (not by a number argument's text,
    ``-0.5``, which stood at its index)."""
    import tensor_dap

    with tensor_dap.watch(rules=["nan-inf"]) as watch:
        deg = torch.tensor([2.0, 0.0, 1.0])
        dinv = deg.pow(-0.5)
        scaled = torch.log(deg) * 2
    names = [[tensor.name for tensor in finding.tensors] for finding in watch.findings]
    assert names == [["deg", "dinv"], ["deg", "torch.log(deg)"]]
    assert float(dinv[1]) == float(scaled[1]) * -1 == float("inf")


def test_an_augmented_assignment_does_not_name_the_result() -> None:
    """``x += torch.log(deg)``: the Inf is in the temporary ``torch.log(deg)``, not in ``x``."""
    import tensor_dap

    with tensor_dap.watch(rules=["nan-inf"]) as watch:
        deg = torch.tensor([2.0, 0.0, 1.0])
        x = torch.zeros(3)
        x += torch.log(deg)
    names = [[tensor.name for tensor in finding.tensors] for finding in watch.findings]
    assert names == [["deg", "torch.log(deg)"]]
    assert x[1] == float("-inf")
