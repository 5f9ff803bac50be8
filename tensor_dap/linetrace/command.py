"""``tensor-dap trace SCRIPT``: run a script with the per-line tracer and the watch engine.

The script runs exactly as ``python SCRIPT ARGS`` would (:func:`tensor_dap.runner.run_script`);
its user code is traced line by line, the rules' findings appear inline at their line, and
what the trace saw goes to the trace store like ``tensor-dap check`` writes it, so the editor
shows it. Exit status: the script's own.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from tensor_dap import report
from tensor_dap.agent.engine import Watch, process_info
from tensor_dap.agent.trace_session import TraceSession
from tensor_dap.linetrace.backends import make_backend
from tensor_dap.linetrace.output import Sink
from tensor_dap.linetrace.store import LineStore
from tensor_dap.linetrace.tracer import Tracer
from tensor_dap.runner import ExitInfo, end_as_interrupted, run_script
from tensor_dap.tracedb import default_trace_path, process_label, run_command


def run_trace(
    script: str,
    args: list[str],
    rules: list[str],
    output: Optional[str] = None,
    depth: Optional[int] = None,
    only: Optional[str] = None,
    nan: bool = False,
    trace_path: Optional[str] = None,
    simulate: Optional[str] = None,
) -> int:
    cwd = os.getcwd()
    if simulate:  # before the watch: its mode must lie above the simulation's
        from tensor_dap import simulate as simulation

        simulation.start(simulate)
    store = LineStore(process=process_label(process_info()))
    tracer = Tracer(Sink(output, append=False), max_depth=depth, only=only, nan=nan, store=store)
    watch = Watch(rules=rules, on_finding=tracer.finding)
    db_path = str(trace_path or default_trace_path(cwd))
    command = run_command("trace", simulate)
    session = TraceSession(db_path, store, None, command, [script, *args], cwd)
    session.start(watch.findings)
    backend = make_backend(tracer)
    exit_info = ExitInfo("exception", 1, "did not run")
    try:
        with watch:
            backend.start()
            try:
                exit_info = run_script(script, args)
            finally:
                backend.stop()
                tracer.close()
    finally:
        session.finish(exit_info.to_json())
        sys.stdout.flush()
        if output:
            report.print_summary(watch.findings, watch.counts, simulated=simulate)
        if session.error:
            report.warn(f"trace store not written: {session.error}")
    end_as_interrupted(exit_info)
    return exit_info.code
