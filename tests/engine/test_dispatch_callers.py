"""Functions written in Python that reach the watch through ``torch.overrides`` (``F.relu``,
``nn.init.*``, a tensor subclass's Python ``tolist``) are placed at the line that called them,
as C functions are: each call site is its own, and rules that look at the caller see the user."""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F

import tensor_dap
from tensor_dap.testing import accelerator_device


def _line(function, text: str) -> int:  # noqa: ANN001
    lines, first = inspect.getsourcelines(function)
    return next(first + i for i, line in enumerate(lines) if text in line)


def test_tolist_of_an_accelerator_tensor_is_reported_at_the_users_line(engine_path) -> None:  # noqa: ANN001
    x = torch.randn(4, device=accelerator_device())
    w = torch.ones(4, device=accelerator_device(), requires_grad=True)
    with tensor_dap.watch(rules=["leaves-device"]) as watch:
        for _ in range(2):  # a copy at every training step
            (x * w).sum().backward()
            values = x.tolist()
    (finding,) = watch.findings
    here = test_tolist_of_an_accelerator_tensor_is_reported_at_the_users_line
    assert finding.line == _line(here, "values = x.tolist()")
    assert finding.message.startswith("`x.tolist()`: x (4,) float32 leaves accel:0")
    assert len(values) == 4


def test_each_call_of_a_python_function_is_its_own_call_site(engine_path) -> None:  # noqa: ANN001
    """Many ``F.relu`` calls elsewhere first (the 8 fully recorded runs of a site used to be
    spent on them): the relu of the line below still has its origin recorded."""
    with tensor_dap.watch(rules=["grad-lost"]) as watch:
        for _ in range(20):
            F.relu(torch.randn(3))
        h = F.relu(torch.randn(3))
    prov = watch.provenance.lookup(h)
    here = test_each_call_of_a_python_function_is_its_own_call_site
    assert prov is not None and (prov.line, prov.op) == (_line(here, "h = F.relu("), "relu")
