"""A program's own replacement of a ``torch.Tensor`` method or a ``torch.nn.functional``
function runs once per call under the watch, as it does without it.

Programs and libraries patch torch: ``torch.Tensor.__getitem__ = counting_getitem`` (an index
logger, a shape checker), ``F.relu = traced_relu``; the replacement calls the original it kept.
Torch hands a torch-function mode the function *as it is named now*: ``Tensor.__getitem__``,
``F.relu`` — the replacement — while it is the original that is running. A mode that calls
what it is handed runs the replacement a second time (its counter counts twice, its log prints
twice; under ``--simulate cuda`` three times). So the plan of a replacement
(:func:`tensor_dap.agent.plans.make_plan`) runs torch's original instead: what the original
would have run with no mode on, and the rules see the op by its torch name, at the line that
called it (the replacement's own frame counts as torch's).

The originals are read when this module is imported: ``tensor-dap check`` and ``trace`` import
it before the program runs; a program that patches before it starts a watch itself has its
replacement judged by the slot torch's C tensor type keeps (``__getitem__``, ``__setitem__``).
"""

from __future__ import annotations

import types
from typing import Any, Optional

import torch
import torch.nn.functional as F

from tensor_dap.agent import frames

#: the namespaces whose functions torch hands a mode by their current name, and what each held
#: when tensor-dap was imported
_ORIGINALS: tuple[tuple[Any, dict[str, Any]], ...] = (
    (torch.Tensor, dict(vars(torch.Tensor))),
    (F, dict(vars(F))),
)


#: each replacement planned so far -> torch's original: the simulation's mode, below the watch's,
#: is handed the replacement too when the original runs (the watch's mode sees it first)
REPLACED: dict[Any, Any] = {}


def original_of(func: Any) -> Optional[Any]:
    """Torch's own function that ``func`` replaced (``func`` is what a ``torch.Tensor`` method or
    a ``torch.nn.functional`` function is now, a Python function of the program's); None for any
    other function. Asked once per function (planning), so it may scan the namespaces."""
    if not isinstance(func, types.FunctionType):
        return None
    known = REPLACED.get(func)
    if known is not None:
        return known
    # torch's own Python functions (by their file: a replacement's code counts as torch's
    # once planned, and one factory may make the replacements of several methods)
    if frames.classify_path(func.__code__.co_filename) == frames.INTERNAL:
        return None
    for namespace, originals in _ORIGINALS:
        for name, value in list(vars(namespace).items()):
            if value is not func:
                continue
            original = originals.get(name)
            if (original is None or original is func) and namespace is torch.Tensor:
                original = getattr(torch._C.TensorBase, name, None)
            if original is not None and original is not func:
                REPLACED[func] = original
                frames.treat_as_torch(func.__code__)
                return original
    return None
