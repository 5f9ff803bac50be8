"""Helpers the rules share for reading an op's arguments (one level deep, no pytree)."""

from __future__ import annotations

from typing import Any

import torch

from tensor_dap.agent.rules.hooks import Args, Kwargs

_Tensor = torch.Tensor


def tensor_args(args: Args, kwargs: Kwargs) -> list[Any]:
    """Tensors among the arguments, looking one level into lists and tuples."""
    found = []
    for arg in args:
        if isinstance(arg, _Tensor):
            found.append(arg)
        elif isinstance(arg, (list, tuple)):
            found.extend(a for a in arg if isinstance(a, _Tensor))
    if kwargs:
        for arg in kwargs.values():
            if isinstance(arg, _Tensor):
                found.append(arg)
    return found


def is_cpu_scalar(tensor: Any) -> bool:
    """A 0-dim CPU tensor without grad history: PyTorch treats it as a number on any device."""
    return tensor.dim() == 0 and tensor.device.type == "cpu" and not tensor.requires_grad


def join_names(names: list[str]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


#: the origin of a tensor no op the watch saw made: a subclass's constructor, ``torch.from_dlpack``,
#: an unpickler, a C++ extension, or one made before the watch began
OUTSIDE = "created outside the watched ops"


def created(d: Any) -> str:
    """`` (created at x.py:3 by zeros)``, or `` (created outside the watched ops)`` for a tensor
    no watched op made: a reader who sees nothing there wonders where it came from."""
    return f" ({d.created or OUTSIDE})"
