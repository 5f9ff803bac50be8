"""How a fix names the device, the same way in every message and quick fix.

The runtime ``device-mismatch`` message (``Create y with device=device.``), the language server's
quick fix for that finding and its static lints' fixes (``add `device=device```) all ask
:func:`device_in_fix`: the user's own variable first, then a tensor already on the device, then
the device as a literal with its index (``"cuda:0"``). Imports no torch.
"""

from __future__ import annotations

import ast
import json
from typing import Iterable, Optional


def device_variable(nodes: Iterable[ast.AST]) -> Optional[str]:
    """``"device"`` when the code binds a name ``device`` (an assignment or a parameter): the
    user's own name for the device, the first choice of :func:`device_in_fix`; else None."""
    for node in nodes:
        if isinstance(node, ast.Name) and node.id == "device" and isinstance(node.ctx, ast.Store):
            return "device"
        if isinstance(node, ast.arg) and node.arg == "device":
            return "device"
    return None


def device_in_fix(
    device: str, *, variable: Optional[str] = None, holder: Optional[str] = None
) -> str:
    """The device as a fix writes it in code (``device=...``, ``.to(...)``).

    In this order: the user's own variable (``device``, see :func:`device_variable`) where the
    code binds one; else ``holder.device``, ``holder`` being a tensor already on that device
    (a plain name); else the device as a string literal, double-quoted and with its index as
    torch prints it (``"cuda:0"``; ``"cuda"`` from a static lint, which cannot know the index).
    """
    if variable:
        return variable
    if holder and holder.isidentifier():
        return f"{holder}.device"
    return json.dumps(device)
