"""Renderers by type: a tensor, an ``nn.Module``, an optimizer, the statistics child.

Grow by registering (:func:`register`), not by branching. Lookups go by type and are cached,
so a frame of a thousand tensors costs one ``issubclass`` walk per type.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, NamedTuple, Optional

import torch

from tensor_dap.render import module, optimizer, tensor
from tensor_dap.render.base import Entry, Text
from tensor_dap.render.memory import MemoryDevice, MemoryLine, MemoryTable
from tensor_dap.render.stats import Statistics


class Renderer(NamedTuple):
    kind: type
    value_line: Callable[[Any], str]
    children: Callable[[Any], list[Entry]]


_RENDERERS: list[Renderer] = []
_BY_TYPE: dict[type, Optional[Renderer]] = {}


def register(
    kind: type, value_line: Callable[[Any], str], children: Callable[[Any], list[Entry]]
) -> None:
    _RENDERERS.append(Renderer(kind, value_line, children))
    _BY_TYPE.clear()


def renderer_for(kind: type) -> Optional[Renderer]:
    """The renderer of instances of ``kind``, or ``None``."""
    try:
        return _BY_TYPE[kind]
    except (KeyError, TypeError):
        pass
    found = None
    for renderer in _RENDERERS:
        try:
            if issubclass(kind, renderer.kind):
                found = renderer
                break
        except TypeError:
            continue
    with contextlib.suppress(TypeError):
        _BY_TYPE[kind] = found
    return found


def value_line(obj: Any) -> Optional[str]:
    """The one-line value of ``obj``, ``None`` when no renderer applies. Never raises."""
    renderer = renderer_for(type(obj))
    if renderer is None:
        return None
    try:
        return renderer.value_line(obj)
    except Exception as error:
        return f"<cannot render: {type(error).__name__}>"


def children(obj: Any) -> list[Entry]:
    """The children of ``obj`` (empty when no renderer applies). Never raises."""
    renderer = renderer_for(type(obj))
    if renderer is None:
        return []
    try:
        return renderer.children(obj)
    except Exception as error:
        return [Entry("error", Text(f"<cannot render: {type(error).__name__}>"))]


register(torch.Tensor, tensor.value_line, tensor.children)
register(torch.nn.Module, module.value_line, module.children)
register(torch.optim.Optimizer, optimizer.value_line, optimizer.children)
register(Statistics, Statistics.value_line, Statistics.children)
for _kind in (MemoryTable, MemoryDevice, MemoryLine):  # tensor-dap memory
    register(_kind, _kind.value_line, _kind.children)
