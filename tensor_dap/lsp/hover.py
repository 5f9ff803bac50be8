"""``textDocument/hover``: what the last run saw of the variable under the cursor.

Hovering a name on a line where the trace store has an observation of that name (``y`` or the
last part of ``self.w``) shows its shape, dtype, device, grad state and ``grad_fn`` (a module
or a container of tensors: the hint's summary and the run's detail: parameter count and dtypes,
each item's shape), how many times the line ran, whether the shape varied across runs, and,
when the value comes from a process other than ``main`` (a rank, a worker), which, and when the
run simulated the device (``--simulate cuda``: "`cuda:0` (simulated on the CPU)"). Nothing is
shown on a line edited since the run (see :mod:`tensor_dap.lsp.alignment`).
"""

from __future__ import annotations

from typing import Optional

from lsprotocol import types

from tensor_dap.tracedb import Observation

from .inlay_hints import is_stale
from .store import FileData
from .text import shape_text


def matches(name: str, word: str) -> bool:
    """Whether the observed ``name`` is the hovered ``word`` (``w`` matches ``self.w``)."""
    return bool(word) and (name == word or name.endswith("." + word))


def observation_markdown(obs: Observation, simulated: Optional[str] = None) -> str:
    """The markdown block for one observation (``simulated``: the device kind its run
    simulated, ``"cuda"``, or None)."""
    times = "once" if obs.hits == 1 else f"{obs.hits} times"
    if obs.summary:  # a module or a container of tensors: the hint's text, then its detail
        lines = [f"**{obs.name}**: {obs.summary}", ""]
        lines += (obs.detail or "").splitlines()
        if simulated and f"{simulated}:" in obs.summary:
            lines.append(f"- {simulated} devices simulated on the CPU (`--simulate {simulated}`)")
        lines.append(f"- ran {times}")
        if obs.process != "main":
            lines.append(f"- process: {obs.process}")
        return "\n".join(lines)
    grad = (
        f"grad_fn `{obs.grad_fn}`"
        if obs.grad_fn
        else ("requires grad" if obs.requires_grad else "no grad")
    )
    device = f"`{obs.device}`"
    if simulated and obs.device.split(":")[0] == simulated:
        device += " (simulated on the CPU)"
    lines = [
        f"**{obs.name}**: `{shape_text(obs.shape)}` {obs.dtype} on {device}, {grad}",
        "",
        f"- ran {times}",
    ]
    if obs.shape_varied:
        lines.append("- shape varied across runs")
    if obs.process != "main":
        lines.append(f"- process: {obs.process}")
    return "\n".join(lines)


def hover(
    data: FileData, digest: str, position: types.Position, word: str
) -> Optional[types.Hover]:
    """The hover for ``word`` at ``position``, or None when the store has nothing for it."""
    if is_stale(data, digest):
        return None
    found = [o for o in data.by_line.get(position.line + 1, []) if matches(o.name, word)]
    if not found:
        return None
    body = "\n\n---\n\n".join(
        observation_markdown(o, data.simulated.get(o.last_run_id or 0)) for o in found
    )
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=body),
    )
