"""The frames torch's Python functions leave when they hand themselves to the watch.

With a mode on the stack, ``F.cross_entropy(...)`` calls ``handle_torch_function``, which calls
the mode, which calls ``F.cross_entropy`` again: the first call's frame (and, through torch's own
``handle_torch_function``, that function's frame) exist only because a mode is on. Tracebacks and
warnings' stack levels leave them out, as without tensor-dap. Through the watch's shortcut
(:mod:`tensor_dap.agent.dispatch_shortcut`, C) no ``handle_torch_function`` frame is left: the
function's first frame calls its second directly. No torch import here: the runner asks this of
a traceback after any script failed.
"""

from __future__ import annotations

import linecache
from types import CodeType

_NAME = "handle_torch_function"


def is_dispatch(code: CodeType) -> bool:
    """``torch.overrides.handle_torch_function``: how Python functions reach a mode."""
    return code.co_name == _NAME and code.co_filename.replace("\\", "/").endswith(
        "torch/overrides.py"
    )


def handed_over(outer: CodeType, line: int, inner: CodeType) -> bool:
    """Whether a frame of ``outer`` at ``line`` is a torch function handing itself to a mode
    (``return handle_torch_function(...)`` on that line) through the watch's shortcut, which
    called the frame above it, of ``inner``, from C: the function again, or the one it named
    (``F.max_pool2d``'s ``boolean_dispatch``, ``torch.unique``). Through torch's own, the frame
    above is ``handle_torch_function``'s (:func:`is_dispatch`)."""
    return (
        _NAME in outer.co_names
        and not is_dispatch(inner)
        and "/torch/" in outer.co_filename.replace("\\", "/")
        and _NAME in linecache.getline(outer.co_filename, line)
    )
