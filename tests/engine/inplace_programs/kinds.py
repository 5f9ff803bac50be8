"""The tensor types the ``inplace-saved`` programs run on, chosen by ``sys.argv[1]``.

- ``cpu``: plain CPU tensors;
- ``accel``: tensor-dap's stand-in accelerator (a wrapper subclass with a ``PrivateUse1`` device);
- ``two``: ``TwoTensor``, a wrapper subclass torch ships for its own tests (not ours);
- ``logging``: ``LoggingTensor``, another wrapper subclass shipped by torch;
- ``subclass``: a plain ``torch.Tensor`` subclass made with ``as_subclass`` (not a wrapper).
"""

from __future__ import annotations

import sys

import torch

KINDS = ("cpu", "accel", "two", "logging", "subclass")
KIND = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in KINDS else "cpu"


class Marked(torch.Tensor):
    """A user's own tensor subclass (no ``__torch_dispatch__``)."""


def device(name: str = KIND) -> torch.device:
    if name == "accel":
        from tensor_dap.testing import accelerator_device

        return accelerator_device()
    return torch.device("cpu")


def kind(t: torch.Tensor, name: str = KIND) -> torch.Tensor:
    """``t`` (a CPU tensor without grad) as a tensor of type ``name``."""
    if name == "accel":
        return t.to(device(name))
    if name == "two":
        from torch.testing._internal.two_tensor import TwoTensor

        return TwoTensor(t, t.clone())
    if name == "logging":
        from torch.testing._internal.logging_tensor import LoggingTensor

        return LoggingTensor(t)
    if name == "subclass":
        return t.as_subclass(Marked)
    return t
