"""Python that autograd runs during ``backward()`` sees the simulated device too.

``loss.backward()`` reaches the torch-function modes like any torch call, and a mode's handler
runs with the mode taken off the stack; autograd then runs the program's Python callbacks — a
custom ``autograd.Function``'s ``backward``, a tensor or module hook, activation
checkpointing's recomputation of the forward — with no simulation's mode
(:mod:`~tensor_dap.simulate.mode`: ``"cuda"`` read as the simulated device, CUDA's autocast).
``torch.ones(g.shape, device=g.device)`` in a straight-through estimator's backward would
then ask real CUDA for memory and the process would abort; under ``torch.autocast("cuda")``
a recomputed forward would come out float32 where the forward saved float16 (checkpoint's
"Recomputed values ... have different metadata"): a program that trains on a GPU would fail
under ``--simulate cuda``. So the autograd engine runs with the simulation's mode pushed
whenever it is not active: torch's ``_engine_run_backward`` (what ``backward`` and
``autograd.grad`` call, PyTorch ≥ 2.3; the callbacks inherit the caller's modes) is wrapped,
as ``torch.compiler`` itself wraps it, and so is the function given to ``checkpoint``
(PyTorch before 2.3).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
import torch.autograd.graph
import torch.utils.checkpoint

from tensor_dap.simulate.mode import SimulationMode

__all__ = ["install"]


def _simulation_active() -> bool:
    stack_at = torch._C._get_function_stack_at
    return any(
        isinstance(stack_at(i), SimulationMode) for i in range(torch._C._len_torch_function_stack())
    )


def _under_simulation(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        if _simulation_active():
            return function(*args, **kwargs)
        with SimulationMode():
            return function(*args, **kwargs)

    return run


def install() -> None:
    """Wrap the autograd engine's entry and ``torch.utils.checkpoint.checkpoint``
    (``checkpoint_sequential`` calls it too)."""
    engine_run = getattr(torch.autograd.graph, "_engine_run_backward", None)
    if engine_run is not None:
        wrapped = _under_simulation(engine_run)
        torch.autograd.graph._engine_run_backward = wrapped
        if getattr(torch.autograd, "_engine_run_backward", None) is engine_run:
            # (imported by name there)
            torch.autograd._engine_run_backward = wrapped  # type: ignore[attr-defined]
    original = torch.utils.checkpoint.checkpoint

    def checkpoint(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return original(_under_simulation(function), *args, **kwargs)

    checkpoint.__doc__ = original.__doc__
    checkpoint.__wrapped__ = original  # type: ignore[attr-defined]
    torch.utils.checkpoint.checkpoint = checkpoint
