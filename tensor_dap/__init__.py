"""tensor-dap: a PyTorch-aware debugger.

The public Python API is small: :func:`watch` runs the rules engine around a block of code
(the debug adapter's agent and ``tensor-dap check`` use the same engine).
"""

from __future__ import annotations

from typing import Any, Optional

__version__ = "0.1.0"

__all__ = ["__version__", "snoop", "watch"]


def watch(*args: Any, simulate: Optional[str] = None, **kwargs: Any) -> Any:
    """Watch the tensor operations of a ``with`` block.

    See :class:`tensor_dap.agent.engine.Watch` for the arguments. ``simulate="cuda"``: as
    ``tensor-dap check --simulate cuda``, the program's CUDA code runs on the CPU as if one CUDA
    device were there (:mod:`tensor_dap.simulate`). It starts here, before the watch (whose
    mode must lie above the simulation's), and stays on for the rest of the process, in the
    calling thread: call it before the program first asks ``torch.cuda`` or makes a tensor on
    CUDA.
    """
    if simulate is not None:
        from tensor_dap import simulate as simulation

        simulation.start(simulate)
    from tensor_dap.agent.engine import Watch

    return Watch(*args, **kwargs)


def snoop(*args: Any, **kwargs: Any) -> Any:
    """Trace a function (``@snoop()``) or block (``with snoop():``) line by line, like
    ``torchsnooper.snoop()``. See :class:`tensor_dap.linetrace.snoop.snoop` for the arguments.
    """
    from tensor_dap.linetrace.snoop import snoop as _snoop

    return _snoop(*args, **kwargs)
