"""Pause the debugger on the user's line that caused a finding.

The engine calls :func:`suspend_on_finding` in the user's frame, before the offending op runs.
debugpy (>= 1.8.22) stops on a synthetic traceback holding just that frame, as an exception
stop whose message starts with ``[rule-id]``; the adapter turns that prefix back into the
stop's ``text`` and the ``exceptionInfo`` id. Continue resumes the program as if nothing
happened.
"""

from __future__ import annotations

import types
from typing import Optional

from tensor_dap.agent.findings import Finding


class TensorBreakpoint(Exception):
    """The exception shown for a tensor rule stop (never raised into user code)."""


def stop_message(finding: Finding) -> str:
    """``[rule] message``; in a rank or worker process ``[rule] [rank 1] message``, so the
    editor shows which process stopped."""
    from tensor_dap.agent.process import process_tag

    tag = process_tag(finding.process)
    return (
        f"[{finding.rule}] [{tag}] {finding.message}"
        if tag
        else f"[{finding.rule}] {finding.message}"
    )


def suspend_on_finding(finding: Finding, frame: Optional[types.FrameType]) -> None:
    if frame is None:
        return
    import debugpy

    if not debugpy.is_client_connected():
        return
    error = TensorBreakpoint(stop_message(finding))
    trace = types.TracebackType(None, frame, frame.f_lasti, frame.f_lineno)
    error.__traceback__ = trace
    debugpy.trigger_exception_handler((TensorBreakpoint, error, trace), as_uncaught=False)
