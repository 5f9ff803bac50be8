"""``model.to(device)`` keeps the module's Parameter objects on the stand-in accelerator (and
``--simulate cuda``'s device), as on a GPU.

On CUDA, ``Module._apply`` (``.to``, ``.cuda``, ``.cpu``, ``.half``) moves each parameter in
place (``param.data = moved``: CPU and CUDA tensors are of compatible kinds), so the objects the
program holds stay the module's: tied weights (``wte.weight = lm_head.weight``, nanoGPT and
every language model) stay tied, and an optimizer built before ``model.to(device)`` trains the
model. A stand-in tensor is a wrapper subclass, not a kind a plain tensor's data can be set to,
so ``_apply`` would make a new Parameter per module instead: the tie breaks (two parameters
where the GPU run has one) and that optimizer trains stale CPU copies, silently. PyTorch's own
answer for wrapper subclasses is to swap the tensors' contents in place
(``torch.utils.swap_tensors``, the path ``_apply`` takes for traceable wrapper subclasses and
under ``torch.__future__.set_swap_module_params_on_conversion(True)``); here it is taken for
every move to, from or on the stand-in: the same objects, as on a GPU, with the attributes the
program set on them. (Their class is the stand-in's: a subclass of ``nn.Parameter`` is still a
parameter, ``isinstance(p, nn.Parameter)``, but no longer an instance of its own class.)

A swap needs the tensor held by nothing else. The old ``nn.utils.weight_norm`` and
``spectral_norm`` keep the weight they compute from the module's parameters as a plain attribute
(``module.weight``, remade before each forward), whose graph holds those parameters: it is let
go during the move and made anew after it (on a GPU it stays until the next forward remakes it).

A lazy module's parameters (``nn.LazyLinear(7).to("cuda")``) have no data to move until the
first forward: on a GPU they stay uninitialized with an empty CUDA tensor as their data, and
``materialize`` makes them there. Here they stay uninitialized, told where they go, and
``materialize`` makes them on the stand-in, swapped in place.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch
import torch.nn.modules.module as module_module
from torch.__future__ import (
    get_swap_module_params_on_conversion,
    set_swap_module_params_on_conversion,
)
from torch.nn.parameter import UninitializedTensorMixin, is_lazy  # type: ignore[attr-defined]

from tensor_dap.testing.standin.tensor import AcceleratorTensor, attributes

__all__ = ["install"]

#: what ``Module._apply`` asks of a moved tensor to swap it in place (imported by name there)
_SWAP_CHECK = "is_traceable_wrapper_subclass"


_installed = False


def install() -> None:
    """Moves to the stand-in swap (``_apply`` asks ``is_traceable_wrapper_subclass`` of the
    moved tensor); moves from it swap too (the swap flag on while a module holding stand-in
    parameters applies ``fn``). Once per process."""
    global _installed
    if _installed:
        return
    _installed = True
    traceable: Callable[[Any], bool] = getattr(module_module, _SWAP_CHECK)

    def swaps_in_place(tensor: Any) -> bool:
        return isinstance(tensor, AcceleratorTensor) or traceable(tensor)

    setattr(module_module, _SWAP_CHECK, swaps_in_place)
    original_apply: Callable[..., Any] = torch.nn.Module._apply

    def _apply(self: torch.nn.Module, fn: Callable[..., Any], recurse: bool = True) -> Any:
        lazy = _lazy_moves(self, fn)
        try:
            return _apply_to_the_rest(self, fn, recurse)
        finally:
            for table, name, tensor in lazy:
                table[name] = tensor

    def _apply_to_the_rest(
        self: torch.nn.Module, fn: Callable[..., Any], recurse: bool = True
    ) -> Any:
        computed = _computed_weights(self)
        for hook in computed:  # (its graph holds the parameters to swap)
            vars(self).pop(hook.name, None)
        attributes = _parameter_attributes(self)
        try:
            if not any(isinstance(p, AcceleratorTensor) for p in self._parameters.values()):
                return original_apply(self, fn, recurse)
            before = get_swap_module_params_on_conversion()
            set_swap_module_params_on_conversion(True)
            try:
                return original_apply(self, fn, recurse)
            finally:
                set_swap_module_params_on_conversion(before)
        finally:
            for hook in computed:
                _remake(self, hook)
            _keep_attributes(self, attributes)

    _apply.__doc__ = original_apply.__doc__
    torch.nn.Module._apply = _apply  # type: ignore[method-assign]
    _materialize_where_told()


#: attribute of an uninitialized parameter or buffer moved to the stand-in: the
#: (device, dtype) its ``materialize`` makes it with
_TOLD = "_tensor_dap_materialize_on"


def _lazy_moves(module: torch.nn.Module, fn: Callable[..., Any]) -> list[tuple[Any, str, Any]]:
    """The module's uninitialized parameters and buffers that ``fn`` moves to or from the
    stand-in: told where (an empty tensor of theirs, as ``fn`` moves it), and taken out
    of the module for the move: (table, name, tensor) to put back."""
    taken = []
    for table in (module._parameters, module._buffers):
        for name, tensor in list(table.items()):
            if tensor is None or not is_lazy(tensor):
                continue
            device, dtype = vars(tensor).get(_TOLD, (tensor.data.device, tensor.data.dtype))
            probe = fn(torch.empty(0, device=device, dtype=dtype))
            if isinstance(probe, AcceleratorTensor) or _TOLD in vars(tensor):
                vars(tensor)[_TOLD] = (probe.device, probe.dtype)
                taken.append((table, name, tensor))
                del table[name]
    return taken


def _materialize_where_told() -> None:
    original: Callable[..., None] = UninitializedTensorMixin.materialize

    def materialize(self: Any, shape: Any, device: Any = None, dtype: Any = None) -> None:
        told = vars(self).pop(_TOLD, None)
        if told is not None:
            device, dtype = device or told[0], dtype or told[1]
        if told is None or torch.device(device).type == "cpu":
            original(self, shape, device=device, dtype=dtype)
            return
        data = torch.empty(shape, device=device, dtype=dtype)
        made = (
            torch.nn.Parameter(data, requires_grad=self.requires_grad)
            if isinstance(self, torch.nn.Parameter)
            else data
        )
        torch.utils.swap_tensors(self, made)  # type: ignore[no-untyped-call]

    materialize.__doc__ = original.__doc__
    UninitializedTensorMixin.materialize = materialize


def _parameter_attributes(module: torch.nn.Module) -> dict[str, dict[str, Any]]:
    """The attributes the program set on the module's own parameters (``p.sequence_parallel =
    True``, ``p.group = "no_decay"``): a swap gives each object the moved tensor's, and on a GPU
    the parameter keeps its own."""
    found = {
        name: {k: v for k, v in attributes(p).items() if k != "_is_param"}
        for name, p in module._parameters.items()
        if p is not None
    }
    return {name: held for name, held in found.items() if held}


def _keep_attributes(module: torch.nn.Module, attributes: dict[str, dict[str, Any]]) -> None:
    for name, held in attributes.items():
        parameter = module._parameters.get(name)
        if parameter is not None:
            for key, value in held.items():
                vars(parameter).setdefault(key, value)


def _computed_weights(module: torch.nn.Module) -> list[Any]:
    """The module's ``weight_norm`` / ``spectral_norm`` (the old ``nn.utils`` ones) forward
    pre-hooks whose computed weight the module holds."""
    found = (
        getattr(sys.modules.get(f"torch.nn.utils.{name}"), kind, None)
        for name, kind in (("weight_norm", "WeightNorm"), ("spectral_norm", "SpectralNorm"))
    )
    kinds = tuple(kind for kind in found if isinstance(kind, type))
    hooks: list[Any] = [
        hook for hook in module._forward_pre_hooks.values() if kinds and isinstance(hook, kinds)
    ]
    # (before any forward, spectral_norm's is a leaf, which blocks nothing: a model deep-copied
    # for its EMA right after the move needs it to stay one)
    return [hook for hook in hooks if getattr(vars(module).get(hook.name), "grad_fn", None)]


def _remake(module: torch.nn.Module, hook: Any) -> None:
    """The computed weight, as the hook makes it (of the moved parameters)."""
    if type(hook).__name__ == "SpectralNorm":
        weight = hook.compute_weight(module, do_power_iteration=False)
    else:
        weight = hook.compute_weight(module)
    setattr(module, hook.name, weight)
