"""Parameters the program updates itself, in place under ``no_grad`` (part of ``grad-lost``).

An EMA teacher (BYOL, mean teacher) or a VQ-VAE codebook learned by exponential moving
averages is meant to get no gradient: its output is ``detach()``ed or passed straight through,
and the program writes it by hand after each step (``t.mul_(m).add_(s, alpha=1 - m)``,
``torch._foreach_lerp_``, ``codebook.index_add_``). Kept in the optimizer beside the trained
parameters (``Adam(model.parameters())``), it has no gradient at each step, as a parameter cut
off by mistake does. Its in-place writes under ``no_grad`` after the first ``backward()`` (not
an initialisation) mark it as updated by hand: grad-lost's step check leaves it out.

Writes are seen by grad-lost's sampled ``observe`` (the first runs of each line, then one in
64), by storage (``p.data.mul_()``, a state dict's tensors write the parameter's storage).
"""

from __future__ import annotations

from typing import Any

import torch

from tensor_dap.agent import frames
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.rules import _trained_under_no_grad
from tensor_dap.agent.storage import storage_key

_Tensor = torch.Tensor
#: rule_state key: the storage keys of tensors user code wrote in place under no_grad after the
#: first backward()
_WRITTEN = "grad-lost.written-by-hand"


def observe(op: OpInfo, args: Any, caller: Any, state: Any) -> None:
    """An op under ``no_grad``: an in-place write by the program after the first backward()."""
    if not op.inplace or not args or _trained_under_no_grad.last_backward(state) < 0:
        return
    # (the program's code or a library's, as timm's ModelEma: not torch's own)
    if caller is None or frames.code_kind(caller.f_code) == frames.INTERNAL:
        return
    target = args[0]
    for tensor in target if isinstance(target, (list, tuple)) else (target,):
        if isinstance(tensor, _Tensor):
            key = storage_key(tensor)
            if key is not None:
                state.rule_state.setdefault(_WRITTEN, set()).add(key)


def updated_by_hand(param: Any, state: Any) -> bool:
    """Whether the program wrote ``param``'s storage in place under ``no_grad``."""
    written = state.rule_state.get(_WRITTEN)
    return bool(written) and storage_key(param) in written
