"""tensor-dap: a PyTorch-aware debugger.

The public Python API is small: :func:`watch` runs the rules engine around a block of code
(the debug adapter's agent and ``tensor-dap check`` use the same engine).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "snoop", "watch"]


def watch(*args: Any, **kwargs: Any) -> Any:
    """Watch the tensor operations of a ``with`` block.

    See :class:`tensor_dap.agent.engine.Watch` for the arguments.
    """
    from tensor_dap.agent.engine import Watch

    return Watch(*args, **kwargs)


def snoop(*args: Any, **kwargs: Any) -> Any:
    """Trace a function (``@snoop()``) or block (``with snoop():``) line by line, like
    ``torchsnooper.snoop()``. See :class:`tensor_dap.linetrace.snoop.snoop` for the arguments.
    """
    from tensor_dap.linetrace.snoop import snoop as _snoop

    return _snoop(*args, **kwargs)
