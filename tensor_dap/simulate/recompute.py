"""Activation checkpointing under the simulation: the recomputation sees the simulated device.

``torch.utils.checkpoint`` runs the checkpointed function a second time during ``backward()``,
to rebuild the activations it did not keep; autograd runs it with no torch-function mode
active, so the simulation's mode (:mod:`~tensor_dap.simulate.mode`: ``"cuda"`` read as the
simulated device, CUDA's autocast) would miss it. A forward making a tensor on ``x.device``
(positions, masks: every transformer block) would then ask real CUDA for it, and under
``torch.autocast("cuda")`` the recomputed activations would come out float32 where the forward
saved float16 (checkpoint's "Recomputed values ... have different metadata"): a program that
trains on a GPU would fail under ``--simulate cuda``. So the function given to ``checkpoint``
runs with the simulation's mode pushed whenever it is not active (the recomputation; the
forward already has it).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.utils.checkpoint

from tensor_dap.simulate.mode import SimulationMode

__all__ = ["install"]


def _simulation_active() -> bool:
    stack_at = torch._C._get_function_stack_at
    return any(
        isinstance(stack_at(i), SimulationMode) for i in range(torch._C._len_torch_function_stack())
    )


def _under_simulation(function: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        if _simulation_active():
            return function(*args, **kwargs)
        with SimulationMode():
            return function(*args, **kwargs)

    return run


def install() -> None:
    """Wrap ``torch.utils.checkpoint.checkpoint`` (``checkpoint_sequential`` calls it too)."""
    original = torch.utils.checkpoint.checkpoint

    def checkpoint(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return original(_under_simulation(function), *args, **kwargs)

    checkpoint.__doc__ = original.__doc__
    checkpoint.__wrapped__ = original  # type: ignore[attr-defined]
    torch.utils.checkpoint.checkpoint = checkpoint
