"""From a rule's :class:`~tensor_dap.agent.rules.Report` to a
:class:`~tensor_dap.findings.Finding` at the user's line, handed to the watch's sinks; and
what happens when a rule raises.

A report says which tensors and how to word the message; here the finding gets the user's
file and line, the tensors' names as the user wrote them (:mod:`tensor_dap.agent.naming`),
where each was made (the watch's provenance), and the process it happened in. The same
finding is reported once per line unless the watch says otherwise (``dedupe``).
"""

from __future__ import annotations

import ast
import logging
import os
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any, Optional

import torch

from tensor_dap.agent import frames, naming
from tensor_dap.agent.describe import describe_tensor
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.process import process_info
from tensor_dap.agent.rules import Report
from tensor_dap.findings import Finding

if TYPE_CHECKING:
    from tensor_dap.agent.engine import Watch

log = logging.getLogger("tensor_dap.engine")


#: the op a report made at the end of the program is worded with (``Watch.finish``)
END_OF_PROGRAM = OpInfo("end of program")


def emit(
    watch: Watch, rule_id: str, report: Report, info: OpInfo, caller: Optional[FrameType]
) -> None:
    """Turn a rule's report into a finding at the user's line and hand it to the sinks
    (``Watch._emit``). ``caller`` None: no frame runs (the program ended); the report then
    says its line (``at``) and the sinks get no frame."""
    if watch._emitting:  # a sink (e.g. the debugger's REPL) ran torch code: ignore it
        return
    watch._emitting = True
    try:
        # building the message touches tensors: keep every torch-function override out of it
        with torch._C.DisableTorchFunction():
            built = _build_finding(watch, rule_id, report, info, caller)
        if built is not None:  # the sinks (a debugger pause) run with torch as the user has it
            finding, user = built
            for sink in list(watch.sinks):
                try:
                    sink(finding, user)
                except Exception:
                    log.exception("tensor-dap: a finding sink failed")
    except Exception:
        log.exception("tensor-dap: could not report a %s finding", rule_id)
    finally:
        watch._emitting = False


def _build_finding(
    watch: Watch, rule_id: str, report: Report, info: OpInfo, caller: Optional[FrameType]
) -> Optional[tuple[Finding, Optional[FrameType]]]:
    """The finding and the user's frame, or None: a duplicate, or the rule decided, seeing the
    source, that this is fine."""
    user = report.frame or frames.user_frame(caller)
    if user is None and (report.at is None or report.tensors):
        return None
    if report.at is not None:
        path, line = os.path.abspath(report.at[0]), report.at[1]
    else:
        assert user is not None
        path, line = os.path.abspath(user.f_code.co_filename), user.f_lineno
    key = (rule_id, path, line)
    with watch._lock:
        watch.counts[key] = watch.counts.get(key, 0) + 1
        if watch.dedupe and watch.counts[key] > 1:
            return None
    names = naming.name_tensors(report.tensors, info.name, caller, user, report.operands)
    # (an op inside a library function, caller not the user's frame, is not the line's result)
    if report.result and names and caller is not None and caller is user:
        names[-1] = _result_name(caller, path, line)
    described = [
        describe_tensor(t, n, watch.provenance.lookup(t) or naming.assigned_before(user, n))
        for t, n in zip(report.tensors, names)
    ]
    if report.at is not None:
        expression = naming.source_line(path, line)
    else:
        assert user is not None
        expression = naming.expression_text(user)
    message = report.message(described, expression)
    if message is None:
        return None
    finding = Finding(
        rule=rule_id,
        path=path,
        line=line,
        message=message,
        tensors=[d.info() for d in described],
        process=process_info(),
    )
    watch.findings.append(finding)
    return finding, user


def _result_name(user: FrameType, path: str, line: int) -> str:
    """The op's result as the line names it: the variable it is assigned to when the op is the
    whole right-hand side (``dinv`` of ``dinv = deg.pow(-0.5)``), else its expression."""
    expression = naming.expression_text(user)
    statement = naming.parsed_statement(naming.source_line(path, line))
    if (  # (not `x += torch.log(deg)`: the result is the temporary, not x)
        isinstance(statement, ast.Assign)
        and len(statement.targets) == 1
        and ast.unparse(statement.value) == naming.normalized_expression(expression)
    ):
        return ast.unparse(statement.targets[0])
    return expression


def raised(
    watch: Watch,
    info: OpInfo,
    args: tuple[Any, ...],
    kwargs: Any,
    error: BaseException,
    caller: FrameType,
) -> None:
    """An op raised ``error`` into the user's frame ``caller``: the rules' ``raised`` hooks see
    it before the stack unwinds (``Watch._raised``; the error then goes on unchanged)."""
    if watch._emitting or watch._mode is None:
        return
    for rule_id, hook in watch._raise_hooks:
        try:
            with torch._C.DisableTorchFunction():
                report = hook(info, args, kwargs, error, caller, watch)
        except Exception as failure:
            watch._rule_failed(rule_id, failure)
            continue
        if report is not None:
            watch._emit(rule_id, report, info, caller)


def rule_failed(watch: Watch, rule_id: str, error: Optional[BaseException] = None) -> None:
    """A rule raised (``error``, or the exception being handled): log it once, switch it
    off, keep the program running (``Watch._rule_failed``)."""
    if rule_id in watch.failed:
        return
    error = error if error is not None else sys.exc_info()[1]
    watch.failed[rule_id] = failure_reason(error)
    log.warning("tensor-dap: rule %s failed and was switched off", rule_id, exc_info=error)
    watch._replan()


def failure_reason(error: Optional[BaseException]) -> str:
    """``"NotImplementedError: Could not run 'aten::ne.Scalar' ..."``: one line of a summary
    (torch's messages can run to a hundred lines)."""
    if error is None:
        return "unknown error"
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    if len(first) > 160:
        first = first[:157] + "..."
    return f"{type(error).__name__}: {first}" if first else type(error).__name__
