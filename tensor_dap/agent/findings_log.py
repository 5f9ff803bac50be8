"""Findings of the child processes of a run, collected by the parent for one merged report.

Each process appends JSON lines to its own file in the run's folder: ``{"start": ...}`` when its
agent starts, one ``{"finding": ...}`` per finding as it happens, ``{"end": ...}`` with its
counts when it exits. A file per process needs no lock, and a line written before a crash or a
``kill -9`` is kept: the parent reports what it got, and which processes never said they ended.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Optional

from tensor_dap.agent.process import process_info
from tensor_dap.findings import Finding, MalformedFinding, process_tag

SUFFIX = ".jsonl"


class FindingsLog:
    """The writing side, in one process: a finding sink plus start and end records."""

    def __init__(self, run_dir: str) -> None:
        self.path = os.path.join(run_dir, f"{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}")
        self._started = False

    def _append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        try:  # one O_APPEND write per record: whole lines, even from several threads
            descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(descriptor, line.encode("utf-8"))
            finally:
                os.close(descriptor)
        except OSError:
            pass  # the run's folder is gone (the parent ended): nothing left to report to

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._append({"start": {"pid": os.getpid(), "argv": list(sys.argv)}})

    def __call__(self, finding: Finding, frame: Optional[FrameType] = None) -> None:
        self.start()
        self._append({"finding": finding.to_json()})

    def end(
        self, counts: dict[tuple[str, str, int], int], failed: Optional[dict[str, str]] = None
    ) -> None:
        """``failed``: the rules this process switched off because they raised, and why."""
        self.start()
        self._append(
            {
                "end": {
                    "process": process_info(),
                    "counts": [[rule, path, line, n] for (rule, path, line), n in counts.items()],
                    "failed": dict(failed or {}),
                }
            }
        )


@dataclass
class ProcessRecord:
    """One process that reported: its pid, its last known identity, whether it said it ended."""

    pid: int
    argv: list[str] = field(default_factory=list)
    process: dict[str, Any] = field(default_factory=dict)
    ended: bool = False


@dataclass
class Collected:
    """Everything the processes of a run reported, in the order they reported it."""

    findings: list[Finding] = field(default_factory=list)
    #: how often each finding's (rule, path, line) fired in its process, by finding index
    times: list[int] = field(default_factory=list)
    processes: list[ProcessRecord] = field(default_factory=list)
    #: rules a process switched off because they raised: id -> reason (with the process's tag)
    failed: dict[str, str] = field(default_factory=dict)


def collect(run_dir: str) -> Collected:
    """Read every process's file in ``run_dir``; torn or foreign lines are skipped."""
    result = Collected()
    try:
        names = sorted(n for n in os.listdir(run_dir) if n.endswith(SUFFIX))
    except OSError:
        return result
    for name in names:
        _read_one(os.path.join(run_dir, name), result)
    return result


def _read_one(path: str, result: Collected) -> None:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            lines = file.read().splitlines()
    except OSError:
        return
    record = ProcessRecord(pid=int(os.path.basename(path).split("-", 1)[0] or 0))
    first = len(result.findings)
    counts: dict[tuple[str, str, int], int] = {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("start"), dict):
            record.argv = list(entry["start"].get("argv") or [])
        elif isinstance(entry.get("finding"), dict):
            try:
                finding = Finding.from_json(entry["finding"])
            except MalformedFinding:
                continue
            result.findings.append(finding)
            record.process = dict(finding.process)
        elif isinstance(entry.get("end"), dict):
            record.ended = True
            record.process = dict(entry["end"].get("process") or record.process)
            for item in entry["end"].get("counts") or []:
                try:
                    rule, where, number, times = item
                    counts[(str(rule), str(where), int(number))] = int(times)
                except (TypeError, ValueError):
                    continue
            failed = entry["end"].get("failed")
            if isinstance(failed, dict):
                tag = process_tag(dict(record.process, pid=record.pid, child=True))
                for rule, reason in failed.items():
                    result.failed.setdefault(str(rule), f"{reason} [{tag}]" if tag else str(reason))
    for finding in result.findings[first:]:
        result.times.append(counts.get((finding.rule, finding.path, finding.line), 1))
    result.processes.append(record)
