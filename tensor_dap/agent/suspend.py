"""Pause the debugger on the user's line that caused a finding.

The engine calls :func:`suspend_on_finding` in the user's frame, before the offending op runs.
debugpy (>= 1.8.22) stops on a synthetic traceback holding just that frame, as an exception
stop whose text (:func:`tensor_dap.findings.stop_text`) carries the finding; the adapter decodes
it into the stop's ``text`` and ``description`` and the ``exceptionInfo`` it answers. Continue
resumes the program as if nothing happened.
"""

from __future__ import annotations

import types
from typing import Optional

from tensor_dap.findings import Finding, stop_description, stop_text


class TensorBreakpoint(Exception):
    """The exception shown for a tensor rule stop (never raised into user code).

    Its ``str`` (the stop's text, for debugpy) carries the finding; its ``repr`` (the
    ``__exception__`` variable debugpy shows while stopped) only what a person reads.
    """

    def __init__(self, finding: Finding) -> None:
        super().__init__(stop_description(finding))
        self.finding = finding

    def __str__(self) -> str:
        return stop_text(self.finding)


def suspend_on_finding(finding: Finding, frame: Optional[types.FrameType]) -> None:
    if frame is None:
        return
    import debugpy

    if not debugpy.is_client_connected():
        return
    error = TensorBreakpoint(finding)
    trace = types.TracebackType(None, frame, frame.f_lasti, frame.f_lineno)
    error.__traceback__ = trace
    debugpy.trigger_exception_handler((TensorBreakpoint, error, trace), as_uncaught=False)
