"""``model.to("cuda")`` keeps the module's Parameter objects under the simulation, as on a GPU.

On CUDA, ``Module._apply`` (``.to``, ``.cuda``, ``.cpu``, ``.half``) moves each parameter in
place (``param.data = moved``: CPU and CUDA tensors are of compatible kinds), so the objects the
program holds stay the module's: tied weights (``wte.weight = lm_head.weight``, nanoGPT and
every language model) stay tied, and an optimizer built before ``model.to(device)`` trains the
model. A simulated CUDA tensor is a wrapper subclass, not a kind a plain tensor's data can be
set to, so ``_apply`` would make a new Parameter per module instead: the tie breaks (two
parameters where the GPU run has one) and that optimizer trains stale CPU copies, silently.
PyTorch's own answer for wrapper subclasses is to swap the tensors' contents in place
(``torch.utils.swap_tensors``, the path ``_apply`` takes for traceable wrapper subclasses and
under ``torch.__future__.set_swap_module_params_on_conversion(True)``); the simulation takes
it for every move to, from or on the simulated device: the same objects, as on a GPU.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.modules.module as module_module
from torch.__future__ import (
    get_swap_module_params_on_conversion,
    set_swap_module_params_on_conversion,
)

from tensor_dap.simulate.tensor import SimulatedCudaTensor

__all__ = ["install"]

#: what ``Module._apply`` asks of a moved tensor to swap it in place (imported by name there)
_SWAP_CHECK = "is_traceable_wrapper_subclass"


def install() -> None:
    """Moves to the simulated device swap (``_apply`` asks ``is_traceable_wrapper_subclass`` of
    the moved tensor); moves from it swap too (the swap flag on while a module holding
    simulated parameters applies ``fn``)."""
    traceable: Callable[[Any], bool] = getattr(module_module, _SWAP_CHECK)

    def swaps_in_place(tensor: Any) -> bool:
        return isinstance(tensor, SimulatedCudaTensor) or traceable(tensor)

    setattr(module_module, _SWAP_CHECK, swaps_in_place)
    original_apply: Callable[..., Any] = torch.nn.Module._apply

    def _apply(self: torch.nn.Module, fn: Callable[..., Any], recurse: bool = True) -> Any:
        if not any(isinstance(p, SimulatedCudaTensor) for p in self._parameters.values()):
            return original_apply(self, fn, recurse)
        before = get_swap_module_params_on_conversion()
        set_swap_module_params_on_conversion(True)
        try:
            return original_apply(self, fn, recurse)
        finally:
            set_swap_module_params_on_conversion(before)

    _apply.__doc__ = original_apply.__doc__
    torch.nn.Module._apply = _apply  # type: ignore[method-assign]
