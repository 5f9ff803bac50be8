"""Per-line tensor tracing: what TorchSnooper prints, at a fraction of its cost.

``tensor-dap trace SCRIPT`` (:mod:`command`) and :class:`snoop` share one :class:`Tracer`
(what to show) fed by a backend (:mod:`backends`: ``sys.monitoring`` or ``sys.settrace``,
user code only). Tensors are shown from metadata only; NaN/Inf flags are opt-in.
"""

from __future__ import annotations

from tensor_dap.linetrace.snoop import snoop
from tensor_dap.linetrace.tracer import Tracer

__all__ = ["Tracer", "snoop"]
