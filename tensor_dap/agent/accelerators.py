"""When an accelerator backend comes up, the running watches start comparing devices.

The rules that need an accelerator (catalogue: ``needs_accelerator``) stay out of the per-op
plans until one is in use, so a CPU-only program pays nothing for them. Seeing an op *make* an
accelerator tensor is not enough: a tensor can enter without any op the watch sees (a tensor
subclass's constructor, ``torch.from_dlpack``, a C++ extension, a checkpoint's unpickler).
Each of those needs a backend set up first, so the watch also learns of the backend itself:
:func:`install` wraps the two Python entry points through which a backend comes up in a
process (CUDA's lazy initialisation, the renaming of the ``PrivateUse1`` backend), and
:func:`in_use` is asked again whenever a new function is planned.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable

import torch

__all__ = ["in_use", "install"]

#: callbacks of the running watches, called once a backend comes up
_listeners: list[Callable[[], None]] = []
#: (holder, attribute, original) of each entry point wrapped
_wrapped: list[tuple[Any, str, Any]] = []


def in_use() -> bool:
    """Whether tensors may live on an accelerator in this process now."""
    try:
        if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            return True
    except Exception:
        pass
    return bool(torch._C._get_privateuse1_backend_name() != "privateuseone")


def _notify() -> None:
    for listener in list(_listeners):
        with contextlib.suppress(Exception):  # never into the user's code
            listener()


def _wrap(holder: Any, attribute: str) -> None:
    original = getattr(holder, attribute, None)
    if original is None:
        return

    @functools.wraps(original)
    def entry(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        finally:
            if in_use():
                _notify()

    setattr(holder, attribute, entry)
    _wrapped.append((holder, attribute, original))


class _Listening:
    """The handle :func:`install` returns: ``remove()`` stops the callback."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback

    def remove(self) -> None:
        if self.callback in _listeners:
            _listeners.remove(self.callback)
        if not _listeners:
            while _wrapped:
                holder, attribute, original = _wrapped.pop()
                setattr(holder, attribute, original)


def install(callback: Callable[[], None]) -> _Listening:
    """Call ``callback`` when an accelerator backend comes up, until the handle is removed."""
    if not _wrapped:
        _wrap(torch.cuda, "_lazy_init")
        _wrap(torch.utils, "rename_privateuse1_backend")
    _listeners.append(callback)
    return _Listening(callback)
