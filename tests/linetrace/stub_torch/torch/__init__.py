"""A stand-in ``torch`` for running the tracer on Pythons that have no real torch installed.

TEST DOUBLE, not a model of tensors: it only lets ``tensor_dap.linetrace`` (and what it imports)
load, so that ``tests/linetrace/test_monitoring_versions.py`` can run the interpreter-specific
event source (``sys.monitoring`` on 3.12+) on plain-Python code. Installing real torch for
extra interpreters would download multi-GB wheels. Nothing here behaves like torch: no tensor
is ever made, and code that traces tensors must be tested with the real torch.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any


class dtype:  # noqa: N801 - torch's name
    """``torch.dtype``, a name only."""


class device:  # noqa: N801 - torch's name
    pass


class Tensor:
    """Only for ``isinstance`` checks: no instance is ever made."""


class layout:  # noqa: N801 - torch's name
    """``torch.layout``, names only (``tensor_dap.agent.storage`` keys a table by them)."""


strided, sparse_coo, sparse_csr, sparse_bsr, sparse_csc, sparse_bsc = (layout() for _ in range(6))


class _C:
    """``torch._C.DisableTorchFunction()`` (tracer.py wraps its variable diff in it)."""

    @staticmethod
    def DisableTorchFunction() -> Any:  # noqa: N802 - torch's name
        return nullcontext()


def no_grad() -> Any:
    return nullcontext()


from torch import nn as nn  # noqa: E402 - torch.nn, after the names above
from torch import optim as optim  # noqa: E402 - torch.optim (the Variables renderers register it)
