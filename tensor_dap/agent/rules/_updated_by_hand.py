"""Parameters the program updates itself, in place under ``no_grad`` (part of ``grad-lost``).

An EMA teacher (BYOL, mean teacher) or a VQ-VAE codebook learned by exponential moving
averages is meant to get no gradient: its output is ``detach()``ed or passed straight through,
and the program writes it by hand after each step (``t.mul_(m).add_(s, alpha=1 - m)``,
``torch._foreach_lerp_``, ``codebook.index_add_``). Kept in the optimizer beside the trained
parameters (``Adam(model.parameters())``), it has no gradient at each step, as a parameter cut
off by mistake does. Its in-place writes under ``no_grad`` after the first ``backward()`` (not
an initialisation) mark it as updated by hand: grad-lost's step check leaves it out.

Writes are seen by grad-lost's sampled ``observe`` (the first runs of each line, then one in
64), by storage (``p.data.mul_()``, a state dict's tensors write the parameter's storage). A
parameter given new values by ``p.data = value`` after the first ``backward()`` (BYOL's target
network written ``ma.data = beta * ma.data + (1 - beta) * online.data``) is marked itself (each
such write is seen: torch hands the mode the setter).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from tensor_dap.agent import frames
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.rules import _trained_under_no_grad
from tensor_dap.agent.storage import storage_key
from tensor_dap.agent.tensor_map import TensorMap

_Tensor = torch.Tensor
#: rule_state key: the storage keys of tensors user code wrote in place under no_grad after the
#: first backward()
_WRITTEN = "grad-lost.written-by-hand"
#: rule_state key: the leaves requiring grad (weakly) user code set ``.data`` of after the first
#: backward()
_DATA_SET_ON = "grad-lost.data-set-by-hand"
#: the op name of ``t.data = value``
DATA_SET = "data.__set__"


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


def data_set(args: Any, caller: Any, state: Any) -> None:
    """``target.data = value`` (``args``: the two): a leaf requiring grad given new values by
    the program after the first backward()."""
    if len(args) < 2 or _trained_under_no_grad.last_backward(state) < 0:
        return
    if caller is None or frames.code_kind(caller.f_code) == frames.INTERNAL:
        return
    target = args[0]
    if isinstance(target, _Tensor) and target.requires_grad and target.is_leaf:
        marked = state.rule_state.get(_DATA_SET_ON)
        if marked is None:
            marked = state.rule_state[_DATA_SET_ON] = TensorMap()
        marked.set(target, True)


def updated_by_hand(param: Any, state: Any) -> bool:
    """Whether the program wrote ``param``'s storage in place under ``no_grad``, or set its
    ``.data``."""
    written = state.rule_state.get(_WRITTEN)
    if written and storage_key(param) in written:
        return True
    marked: Optional[TensorMap[bool]] = state.rule_state.get(_DATA_SET_ON)
    return marked is not None and marked.get(param, False)
