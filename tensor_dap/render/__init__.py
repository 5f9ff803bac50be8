"""Tensor, module and optimizer summaries for a debugger's Variables view.

Pure functions over live objects, no debugger imports: :func:`value_line` gives the one-line
value (``tensor<(4, 1) float32 cuda:0 grad AddmmBackward0>``), :func:`children` the entries
shown when it is expanded. The ``pydevd_plugins.extensions.pydevd_plugin_tensor_dap`` bridge
hands them to debugpy (DAP ``variables``); any other frontend may use them the same way.

Never disturbs the debuggee: value lines read metadata only (no data, no device sync); the
statistics child is computed only when it is itself expanded, bounded, under ``no_grad``; no
function here keeps a reference to a tensor once it returns (the statistics child holds a weak
reference). Anything that raises renders as a short marker.

``provenance_hook``: set it to a callable ``hook(tensor) -> Optional[str]`` (e.g. ``"train.py:39
by zeros"``) to add a "created at" child; ``None`` (the default) leaves it out.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from tensor_dap.render.base import Entry, Raw, Text
from tensor_dap.render.registry import children, renderer_for, value_line
from tensor_dap.render.stats import Statistics, compute_statistics

provenance_hook: Optional[Callable[[Any], Optional[str]]] = None

__all__ = [
    "Entry",
    "Raw",
    "Statistics",
    "Text",
    "children",
    "compute_statistics",
    "provenance_hook",
    "renderer_for",
    "value_line",
]
