"""``tensor-dap check``: run a script under the watch engine and report what the rules found.

Exit status: 0 when the script finished and nothing was found, 1 when anything was found or
the script failed, 2 for a usage error (reported by the CLI before anything runs).
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from tensor_dap import report
from tensor_dap.agent.engine import Watch, process_info
from tensor_dap.agent.recorder import TraceRecorder
from tensor_dap.agent.trace_session import TraceSession
from tensor_dap.runner import ExitInfo, run_script
from tensor_dap.trace import default_trace_path, process_label


def run_check(
    script: str,
    args: list[str],
    rules: list[str],
    report_path: Optional[str] = None,
    trace_path: Optional[str] = None,
    options: Optional[dict] = None,
) -> int:
    cwd = os.getcwd()
    recorder = TraceRecorder(process=process_label(process_info()))
    watch = Watch(
        rules=rules,
        on_finding=lambda f, _frame: report.print_finding(f),
        recorder=recorder,
        options=options,
    )
    db_path = str(trace_path or default_trace_path(cwd))
    session = TraceSession(db_path, recorder, watch.line_hits, "check", [script, *args], cwd)
    session.start(watch.findings)
    exit_info = ExitInfo("exception", 1, "did not run")
    try:
        with watch:
            exit_info = run_script(script, args)
    finally:
        session.finish(exit_info.to_json())
        sys.stdout.flush()
        report.print_summary(watch.findings, watch.counts)
        for rule_id, reason in watch.failed.items():
            report.warn(f"rule {rule_id} failed and was switched off: {reason}")
        if session.error:
            report.warn(f"trace store not written: {session.error}")
        if report_path:
            report.write_json_report(
                report_path, watch.findings, exit_info.to_json(), rules, watch.failed
            )
    return 1 if (watch.findings or exit_info.failed) else 0
