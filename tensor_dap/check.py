"""``tensor-dap check``: run a script (or a command such as torchrun) under the watch engine and
report what the rules found, in every Python process of the run.

``check SCRIPT ARGS``: the script runs in this process; ``check -- COMMAND ARGS`` (``torchrun
--nproc_per_node 2 train.py``, ``python -m torch.distributed.run ...``) runs the command as a
child. Either way every Python process it starts gets the agent too (see
:mod:`tensor_dap.agent.spread`), appends its findings to the run's folder, and joins this run in
the trace store; the report at the end merges them all, each labelled with its rank, DataLoader
worker or pid.

Exit status: the program's own when it failed (``sys.exit(3)``: 3; an uncaught exception: 1; an
uncaught ``KeyboardInterrupt``: the process ends by SIGINT after the report, as Python's does; a
command killed by a signal: 128 + its number, as a shell shows it), as without the tool; else 1
when anything was found in any process or a rule failed (and was switched off: the run was not
fully checked), 0 when nothing was; 2 for a usage error (reported before anything runs, or a
command that cannot be started).
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, NoReturn, Optional

from tensor_dap import report
from tensor_dap.agent.child import ProcessAgent, follow_forks
from tensor_dap.agent.engine import Watch
from tensor_dap.agent.findings_log import Collected, collect
from tensor_dap.agent.process import process_info
from tensor_dap.agent.recorder import TraceRecorder
from tensor_dap.agent.spread import ChildConfig, Exported, child_environment
from tensor_dap.agent.trace_session import TraceSession
from tensor_dap.findings import Finding
from tensor_dap.runner import ExitInfo, end_as_interrupted, run_script
from tensor_dap.tracedb import (
    TraceStoreError,
    TraceWriter,
    default_trace_path,
    process_label,
    run_command,
)

USAGE_ERROR = 2
RUN_DIR_PREFIX = "tensor-dap-run-"


@dataclass(frozen=True)
class CheckRequest:
    """What ``check`` is asked for besides the program: the rules, their options, the outputs."""

    #: rule entries as ``parse_rules`` returns them
    rules: list[str]
    #: the JSON report to write (None: none)
    report_path: Optional[str] = None
    #: the trace store (None: ``.tensor-dap/trace.db`` under the current directory)
    trace_path: Optional[str] = None
    #: per-rule options, e.g. ``{"leaves-device": {"scalars": True}}``
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the device kind simulated (``--simulate cuda``), or None
    simulate: Optional[str] = None
    #: keep the books of live tensor memory (``--memory``: this process's tensors)
    memory: bool = False

    def trace_db(self, cwd: str) -> str:
        """The trace store's absolute path."""
        return os.path.abspath(self.trace_path or default_trace_path(cwd))

    def child_config(self, run_dir: str, db_path: str, run_id: Optional[int]) -> ChildConfig:
        """What every process of the run is told: the rules, and where its findings go."""
        return ChildConfig(
            rules=list(self.rules),
            options=dict(self.options),
            run_dir=run_dir,
            trace=db_path if run_id is not None else None,
            run_id=run_id,
            echo=True,
            simulate=self.simulate,
        )


def run_check(script: str, args: list[str], request: CheckRequest) -> int:
    """``check SCRIPT ARGS``: the script in this process, its child processes watched too."""
    cwd = os.getcwd()
    if request.simulate:  # before the watch: its mode must lie above the simulation's
        from tensor_dap import simulate

        simulate.start(request.simulate)
    recorder = TraceRecorder(process=process_label(process_info()))
    watch = Watch(
        rules=request.rules,
        on_finding=lambda f, _frame: report.print_finding(f),
        recorder=recorder,
        options=request.options,
        memory=request.memory,
    )
    db_path = request.trace_db(cwd)
    command = run_command("check", request.simulate)
    session = TraceSession(db_path, recorder, watch.line_hits, command, [script, *args], cwd)
    session.start(watch.findings)
    run_dir = tempfile.mkdtemp(prefix=RUN_DIR_PREFIX)
    config = request.child_config(run_dir, db_path, session.run_id)
    agent = ProcessAgent(config, watch, own_process=True)
    agent.session = session
    follow_forks(agent)  # DataLoader workers forked from here report as themselves
    exported = Exported(config)  # ...and so do the Python processes the script starts
    exit_info = ExitInfo("exception", 1, "did not run")

    def finish(exit_info: ExitInfo) -> int:
        exported.restore()
        session.finish(exit_info.to_json())
        sys.stdout.flush()
        collected = _collect(run_dir)
        findings = [*watch.findings, *collected.findings]
        times = [watch.counts.get((f.rule, f.path, f.line), 1) for f in watch.findings]
        times += collected.times
        failed = {**collected.failed, **watch.failed}
        memory = watch.memory.summary() if request.memory and watch.memory else None
        _report(findings, times, collected, exit_info, request, failed, session.error, memory)
        return _status(exit_info, bool(findings or failed))

    real_exit = os._exit
    pid = os.getpid()

    def exit_now(status: int) -> NoReturn:
        """``os._exit(status)`` in the script: the report first (nothing of the script's runs
        after it, as it asked), then out with check's status; a forked child's goes as is."""
        if os.getpid() == pid:
            os._exit = real_exit
            watch.finish()
            status = finish(ExitInfo("ok" if status == 0 else "exit", status))
            sys.stderr.flush()
        real_exit(status)

    os._exit = exit_now
    try:
        with watch:
            exit_info = run_script(script, args, on_raise=watch.program_failed)
            watch.finish()
    finally:
        if os._exit is exit_now:
            os._exit = real_exit
        status = finish(exit_info)
    end_as_interrupted(exit_info)
    return status


def run_check_command(command: list[str], request: CheckRequest) -> int:
    """``check -- COMMAND ARGS``: the command as a child, every Python process in it watched."""
    cwd = os.getcwd()
    db_path = request.trace_db(cwd)
    writer, run_id, trace_error = _begin_run(db_path, command, cwd, request.simulate)
    run_dir = tempfile.mkdtemp(prefix=RUN_DIR_PREFIX)
    env = child_environment(request.child_config(run_dir, db_path, run_id), os.environ, os.getpid())
    exit_info = ExitInfo("exception", 1, "did not run")
    try:
        try:
            process = subprocess.Popen(command, env=env)
        except OSError as error:
            report.warn(f"cannot run {command[0]}: {error.strerror or error}")
            return USAGE_ERROR
        exit_info = _wait(process)
    finally:
        collected = _collect(run_dir)
        if writer is not None and run_id is not None:
            try:
                writer.end_run(run_id, exit_info.to_json())
                writer.close()
            except (TraceStoreError, sqlite3.Error, OSError) as error:
                trace_error = trace_error or f"{type(error).__name__}: {error}"
    _report(
        collected.findings,
        collected.times,
        collected,
        exit_info,
        request,
        collected.failed,
        trace_error,
    )
    return _status(exit_info, bool(collected.findings or collected.failed))


def _status(exit_info: ExitInfo, found: bool) -> int:
    """The check's exit status (see the module's docstring): a failed program's own first, so
    that a script or a CI step behaves as without the tool."""
    code = exit_info.code & 0xFF  # (what the OS keeps of sys.exit(256) or sys.exit(-1))
    if exit_info.failed and code:
        return code
    return 1 if found else 0


def _begin_run(
    db_path: str, command: list[str], cwd: str, simulate: Optional[str]
) -> tuple[Optional[TraceWriter], Optional[int], Optional[str]]:
    """The run every process of the command joins in the trace store (one ``begin_run``)."""
    try:
        writer = TraceWriter(db_path)
        return writer, writer.begin_run(run_command("check", simulate), command, cwd), None
    except (TraceStoreError, sqlite3.Error, OSError) as error:
        return None, None, f"{type(error).__name__}: {error}"


def _wait(process: subprocess.Popen[bytes]) -> ExitInfo:
    """Wait for the command; Ctrl-C reaches it (same process group) and we report after it."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = process.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    if code >= 0:
        return ExitInfo("ok" if code == 0 else "exit", code)
    name = _signal_name(-code)
    return ExitInfo("signal", 128 - code, f"killed by {name}")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _collect(run_dir: str) -> Collected:
    try:
        return collect(run_dir)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _report(
    findings: list[Finding],
    times: list[int],
    collected: Collected,
    exit_info: ExitInfo,
    request: CheckRequest,
    failed: dict[str, str],
    trace_error: Optional[str],
    memory: Optional[dict[str, Any]] = None,
) -> None:
    """The merged report: stderr summary, warnings, and the JSON file."""
    report.print_summary(findings, {}, times, exit_info.summary(), request.simulate)
    if memory is not None:
        report.print_memory(memory)
    for rule_id, reason in failed.items():
        report.warn(f"rule {rule_id} failed and was switched off: {reason}")
    for record in collected.processes:
        if not record.ended:
            label = process_label(dict(record.process, pid=record.pid, child=True))
            report.warn(
                f"process {record.pid} ({label}) ended without saying so (killed or crashed?); "
                "its findings until then are included"
            )
    if trace_error:
        report.warn(f"trace store not written: {trace_error}")
    if request.report_path:
        processes = [
            {
                "pid": record.pid,
                "label": process_label(dict(record.process, pid=record.pid, child=True)),
                "argv": record.argv,
                "ended": record.ended,
            }
            for record in collected.processes
        ]
        report.write_json_report(
            request.report_path,
            findings,
            exit_info.to_json(),
            request.rules,
            failed,
            processes or None,
            request.simulate,
            memory,
        )
