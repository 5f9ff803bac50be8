"""Whether a graph was computed by modules in eval mode: ``model.eval()`` says the program is
evaluating, so a graph it keeps and never backpropagates is an evaluation run without
``torch.no_grad()`` (``graph-kept``), not a training step's.
"""

from __future__ import annotations

from typing import Any

import torch

from tensor_dap.agent import frames


def in_eval_mode(leaves: set[int], caller: Any) -> bool:
    """Whether every parameter of ``leaves`` (ids) belongs to a module in eval mode that the
    frame ``caller`` names (a local or global variable, ``self`` or one of its attributes): a
    frozen backbone in eval mode under a head in training mode is not evaluating."""
    if not leaves:
        return False
    training: dict[int, bool] = {}
    for module in named_modules(caller):
        for sub in module.modules():
            for param in sub.parameters(recurse=False):
                training[id(param)] = sub.training
    return all(training.get(leaf) is False for leaf in leaves)


def named_modules(frame: Any) -> list[Any]:
    """The ``nn.Module`` objects a frame names: its local variables, ``self`` (and its
    attributes), then its module's globals."""
    found: dict[int, Any] = {}
    try:
        local = frames.read_locals(frame)
        values = list(local.values())
        owner = local.get("self")
        if owner is not None and not isinstance(owner, torch.nn.Module):
            values.extend(getattr(owner, "__dict__", {}).values())
        values.extend(frame.f_globals.values())
    except Exception:  # a frame or an object that will not say
        return []
    for value in values:
        if isinstance(value, torch.nn.Module):
            found.setdefault(id(value), value)
    return list(found.values())
