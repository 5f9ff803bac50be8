"""tensor-dap's renderers in debugpy's Variables view, through pydevd's own extension point.

pydevd imports every ``pydevd_plugin_*`` module of the ``pydevd_plugins.extensions`` namespace
package (no ``__init__.py`` here: it is a namespace portion) and instantiates the
``StrPresentationProvider`` / ``TypeResolveProvider`` classes it finds (registered here as
virtual subclasses, so that the module also imports outside a debugger). This module imports
neither torch nor ``tensor_dap.render`` at import time: ``can_provide`` answers ``False`` until
the debuggee itself has imported torch, so a program without torch pays nothing.

Contexts (DAP ``variables``/``evaluate``): "variables", "watch" and "hover" get the metadata
line; "repl" and "clipboard" get torch's own repr (what the user asked to see), falling back to
the line when that raises.

Containers: a dict, list or tuple holding tensors (``{"x": tensor, ...}``, a batch tuple) gets
pydevd's own one-line repr with each tensor written as its metadata line instead of torch's
repr — formatting the values of 15 tensors for a line nobody reads was two thirds of the time of
a ``variables`` request on a frame with a dict of 1,000 tensors. Containers without a tensor
among their first items are left to pydevd.
"""

from __future__ import annotations

import sys
from typing import Any

try:
    from _pydevd_bundle import pydevd_extension_api as _api
except ImportError:  # imported outside a debugger (tests, tools): plain classes, no registration
    _api = None

_REPR_CONTEXTS = ("repl", "clipboard")
_RENDER_MODULE = "tensor_dap.render"
#: tensor_dap.render's own types that VARIABLES shows (the memory view's rows among them)
_RENDER_TYPES = ("Statistics", "Raw", "MemoryTable", "MemoryDevice", "MemoryLine")


def _render() -> Any:
    """``tensor_dap.render``, imported on first use (only once torch is already loaded)."""
    module = sys.modules.get(_RENDER_MODULE)
    if module is None:
        import tensor_dap.render as module
    return module


def _handles(type_object: Any) -> bool:
    if "torch" not in sys.modules:
        return False  # no tensor can exist yet; pydevd caches the answer per type
    try:
        if type_object.__module__.startswith(_RENDER_MODULE):
            return type_object.__name__ in _RENDER_TYPES
        return _maybe_torch(type_object) and _render().renderer_for(type_object) is not None
    except Exception:
        return False


def _maybe_torch(type_object: Any) -> bool:
    """Cheap pre-check: a class with a torch base somewhere in its MRO."""
    try:
        return any(getattr(k, "__module__", "").startswith("torch") for k in type_object.__mro__)
    except Exception:
        return False


class TensorStrProvider:
    """The value line: ``tensor<(4, 1) float32 cuda:0 grad AddmmBackward0>``."""

    def can_provide(self, type_object: Any, type_name: str) -> bool:
        if getattr(type_object, "__module__", "") == "tensor_dap.render.base":
            return type_name == "Text"
        return _handles(type_object)

    def get_str(self, val: Any) -> str:
        return self.get_str_in_context(val, "variables")

    def get_str_in_context(self, val: Any, context: str) -> str:
        render = _render()
        if isinstance(val, render.Text):
            return str.__str__(val)
        if isinstance(val, render.Raw):
            return "ordinary attributes"
        if context in _REPR_CONTEXTS and not isinstance(val, render.Statistics):
            try:
                return repr(val)
            except Exception:
                pass
        line = render.value_line(val)
        return line if line is not None else "<no renderer>"


CONTAINER_TYPES = (dict, list, tuple)
SCANNED_ITEMS = 16
"""Items of a container looked at for a tensor (pydevd's repr shows at most 15)."""


def _holds_tensor(container: Any, depth: int = 2) -> bool:
    """A tensor among the first items, or among the first items of those (a list of
    ``(x, y)`` batches)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    items = container.values() if isinstance(container, dict) else container
    for index, item in enumerate(items):
        if index >= SCANNED_ITEMS:
            return False
        if isinstance(item, torch.Tensor):
            return True
        if depth > 1 and type(item) in CONTAINER_TYPES and _holds_tensor(item, depth - 1):
            return True
    return False


_summary_repr: Any = None


def _container_repr() -> Any:
    """pydevd's ``SafeRepr`` with tensors written as their metadata line (made on first use)."""
    global _summary_repr
    if _summary_repr is None:
        from _pydevd_bundle.pydevd_safe_repr import SafeRepr

        class SummaryRepr(SafeRepr):
            def _repr_obj(self, obj: Any, level: int, limit_inner: int, limit_outer: int) -> Any:
                torch = sys.modules.get("torch")
                if torch is not None and isinstance(obj, torch.Tensor):
                    line = _render().value_line(obj)
                    if line is not None:
                        yield line
                        return
                yield from super()._repr_obj(obj, level, limit_inner, limit_outer)

        _summary_repr = SummaryRepr()
    return _summary_repr


class ContainerStrProvider:
    """The value line of a dict/list/tuple holding tensors (see the module docstring)."""

    def can_provide(self, type_object: Any, type_name: str) -> bool:
        return type_object in CONTAINER_TYPES

    def get_str(self, val: Any) -> Any:
        return self.get_str_in_context(val, "variables")

    def get_str_in_context(self, val: Any, context: str) -> Any:
        """The line, or None: pydevd then writes the container as it always does."""
        try:
            if context in _REPR_CONTEXTS or not _holds_tensor(val):
                return None
            return _container_repr()(val)
        except Exception:
            return None


class TensorResolveProvider:
    """The children: shape, dtype, device, grad state, statistics (computed when expanded)."""

    def can_provide(self, type_object: Any, type_name: str) -> bool:
        return _handles(type_object)

    def get_contents_debug_adapter_protocol(self, obj: Any, fmt: Any = None) -> list:
        render = _render()
        if isinstance(obj, render.Raw):
            from _pydevd_bundle.pydevd_resolver import defaultResolver

            return defaultResolver.get_contents_debug_adapter_protocol(obj.obj, fmt=fmt)
        return [tuple(entry) for entry in render.children(obj)]

    def get_dictionary(self, obj: Any) -> dict:
        return {name: value for name, value, _ in self.get_contents_debug_adapter_protocol(obj)}

    def resolve(self, obj: Any, attribute: str) -> Any:
        return self.get_dictionary(obj).get(attribute)


if _api is not None:
    _api.StrPresentationProvider.register(TensorStrProvider)
    _api.StrPresentationProvider.register(ContainerStrProvider)
    _api.TypeResolveProvider.register(TensorResolveProvider)
