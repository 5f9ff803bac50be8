"""Which frames are the user's, and the user's frame for the op running now.

A finding is reported at the line of the user's code that caused it, not inside torch or
tensor_dap. "User code" is any file outside torch, tensor_dap, the standard library and
site-packages; when no such frame is on the stack (a library driving torch on its own), the first
frame outside torch and tensor_dap stands in. Classification is cached per code object, so the
hot path pays one dict lookup per frame it walks.
"""

from __future__ import annotations

import inspect
import os
import sys
import sysconfig
from types import CodeType, FrameType
from typing import Any, Optional

import torch

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_TENSOR_DAP_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _library_dirs() -> tuple[str, ...]:
    """Folders whose files are libraries, not the user's code."""
    dirs = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.add(os.path.abspath(path) + os.sep)
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        dirs.add(os.path.join(os.path.abspath(prefix), "lib") + os.sep)
    return tuple(sorted(dirs))


_LIBRARY_DIRS = _library_dirs()

#: id(code object) -> 2 user code, 1 other library code, 0 torch or tensor_dap. Keyed by id:
#: hashing a code object hashes its bytecode and constants (hundreds of ns for a big function);
#: _CODES keeps every classified code object alive so that no id is reused.
_KIND: dict[int, int] = {}
_CODES: dict[int, CodeType] = {}

USER, LIBRARY, INTERNAL = 2, 1, 0


#: the ``co_filename`` prefix of code tensor-dap compiles from text (see method_events)
GENERATED = "<tensor-dap "


def classify_path(path: str) -> int:
    """USER, LIBRARY or INTERNAL for a source path (as in ``co_filename``)."""
    if path.startswith(GENERATED):
        return INTERNAL
    if not path or path.startswith("<"):
        # <stdin>, <string>, <frozen ...>: frozen modules are stdlib, the rest the user's
        return LIBRARY if path.startswith("<frozen") else USER
    path = os.path.abspath(path)
    if path.startswith(_TORCH_DIR) or path.startswith(_TENSOR_DAP_DIR):
        return INTERNAL
    if "site-packages" in path or "dist-packages" in path or path.startswith(_LIBRARY_DIRS):
        return LIBRARY
    return USER


def code_kind(code: CodeType) -> int:
    """Cached :func:`classify_path` of a code object's file."""
    kind = _KIND.get(id(code))
    if kind is None:
        _CODES[id(code)] = code
        kind = _KIND[id(code)] = classify_path(code.co_filename)
    return kind


def treat_as_torch(code: CodeType) -> None:
    """Count ``code`` as torch's from now on: the program's replacement of a torch method
    (:mod:`tensor_dap.agent.replaced_methods`), whose line is not where its op was called."""
    _CODES[id(code)] = code
    _KIND[id(code)] = INTERNAL


def is_tensor_dap_code(code: CodeType) -> bool:
    """Whether ``code`` is tensor-dap's own (not torch's, which is INTERNAL too)."""
    return code_kind(code) == INTERNAL and os.path.abspath(code.co_filename).startswith(
        _TENSOR_DAP_DIR
    )


def is_user_code(code: CodeType) -> bool:
    return code_kind(code) == USER


def site(frame: Optional[FrameType]) -> Optional[tuple[str, int]]:
    """``(co_filename, line)`` of ``frame``'s line, None for no frame."""
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


def user_frame(frame: Optional[FrameType]) -> Optional[FrameType]:
    """The first user frame at or above ``frame``; else the first frame outside torch/tensor_dap."""
    fallback = None
    kinds = _KIND
    while frame is not None:
        code = frame.f_code
        kind = kinds.get(id(code))
        if kind is None:
            kind = code_kind(code)
        if kind == USER:
            return frame
        if kind == LIBRARY and fallback is None:
            fallback = frame
        frame = frame.f_back
    return fallback


def caller_is_user(depth: int) -> bool:
    """Whether the frame ``depth`` levels above the caller of this function is user code."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:
        return False
    return code_kind(frame.f_code) == USER


#: reading ``f_locals`` stores a copy in the frame (Python 3.11 and 3.12; a view from 3.13)
_LOCALS_COPIED = sys.version_info < (3, 13)


def read_locals(frame: FrameType) -> dict[str, Any]:
    """A function frame's local variables, as a dict of this call's own.

    On Python 3.11 and 3.12 ``frame.f_locals`` stores a copy of the locals in the frame, and
    the copy keeps their values alive until the frame returns or someone reads it again: a rule
    looking at a training loop's frame once would keep that iteration's batch and graph alive
    for the whole loop. So the copy is emptied again after reading, when nothing but the frame
    holds it (no ``locals()`` result kept by the program, no debugger reading it now) and no
    Python trace or profile function is set (one would write the copy back into the variables
    after it returns, ``PyFrame_LocalsToFast``: a copy without them would delete them; under a
    debugger the copy is left as it is). Only the frame's own variables leave the copy (the
    next read puts them back); names ``exec`` or ``locals()[k] = v`` put there stay. The
    variables themselves are untouched. Module-level and class-body frames, whose ``f_locals``
    is the namespace itself, are only read, and so is a frame of another thread (a thread a
    debugger suspended sits inside its trace function, which writes the copy back).
    """
    snapshot = frame.f_locals
    values = dict(snapshot)
    code = frame.f_code
    copied = _LOCALS_COPIED and code.co_flags & inspect.CO_OPTIMIZED
    untraced = sys.gettrace() is None and sys.getprofile() is None
    # the frame's reference, this function's, getrefcount's argument: no one else's
    if copied and untraced and sys.getrefcount(snapshot) <= 3 and _on_this_stack(frame):
        for name in code.co_varnames + code.co_cellvars + code.co_freevars:
            snapshot.pop(name, None)
    return values


def _on_this_stack(frame: FrameType) -> bool:
    here: Optional[FrameType] = sys._getframe(1)
    while here is not None:
        if here is frame:
            return True
        here = here.f_back
    return False
