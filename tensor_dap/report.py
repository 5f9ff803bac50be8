"""Findings for people (stderr, with rich) and for programs (the JSON report)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from typing import Any, Optional

from rich.console import Console
from rich.text import Text

from tensor_dap.findings import Finding, process_tag
from tensor_dap.tensor_text import size_text


def _console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def location(finding: Finding, cwd: Optional[str] = None) -> str:
    path = finding.path
    try:
        rel = os.path.relpath(path, cwd or os.getcwd())
        if not rel.startswith(".."):
            path = rel
    except ValueError:
        pass
    return f"{path}:{finding.line}"


def process_suffix(finding: Finding) -> str:
    """`` [rank 1, worker 0]`` or `` [pid 4242]`` for a finding of a child process, else ``""``."""
    tag = process_tag(finding.process)
    return f" [{tag}]" if tag else ""


def format_finding(finding: Finding) -> Text:
    text = Text()
    text.append(location(finding), style="bold")
    text.append(" ")
    text.append(finding.rule, style="bold red")
    text.append(process_suffix(finding), style="cyan")
    text.append("  ")
    text.append(finding.message)
    return text


def print_finding(finding: Finding) -> None:
    """As it happens: one line on stderr."""
    console = _console()
    console.print(Text("tensor-dap: ", style="dim") + format_finding(finding))


def print_summary(
    findings: list[Finding],
    counts: dict[tuple[str, str, int], int],
    times: Optional[list[int]] = None,
    failure: Optional[str] = None,
    simulated: Optional[str] = None,
) -> None:
    """At the end: every finding once, with how often it fired, and ``failure`` (the script
    failed: ``the script failed: exit 3``) beside them: a failed run is never just "no findings".

    ``counts`` (by rule, path, line) gives the times of findings of this process; ``times``
    (one per finding, same order) overrides it for findings collected from other processes.
    The same rule at the same line in several processes is one line naming them all.
    """
    console = _console()
    failed = f"; {failure}" if failure else ""
    if simulated:  # ``--simulate cuda``: never mistaken for a run on the real device
        failed = f" (simulated {simulated} on the CPU){failed}"
    if not findings:
        console.print(
            Text(f"tensor-dap: no findings{failed}", style="yellow" if failure else "green")
        )
        return
    console.print(Text(f"\ntensor-dap: {len(findings)} finding(s){failed}", style="bold"))
    groups: dict[tuple[str, str, int], list[tuple[Finding, int]]] = {}
    for index, finding in enumerate(findings):
        if times is not None and index < len(times):
            count = times[index]
        else:
            count = counts.get((finding.rule, finding.path, finding.line), 1)
        groups.setdefault((finding.rule, finding.path, finding.line), []).append((finding, count))
    for members in groups.values():
        first = members[0][0]
        line = Text()
        line.append(location(first), style="bold")
        line.append(" ")
        line.append(first.rule, style="bold red")
        tags = [process_tag(f.process) for f, _ in members]
        tags = [t for t in dict.fromkeys(tags) if t]
        if tags:
            line.append(f" [{'; '.join(tags)}]", style="cyan")
        line.append("  ")
        line.append(first.message)
        total = sum(count for _, count in members)
        if total > 1:
            line.append(f"  (×{total})", style="dim")
        console.print(line)


def write_json_report(
    path: str,
    findings: Iterable[Finding],
    exit_info: dict[str, Any],
    rules: list[str],
    failed_rules: dict[str, str],
    processes: Optional[list[dict[str, Any]]] = None,
    simulated: Optional[str] = None,
    memory: Optional[dict[str, Any]] = None,
) -> None:
    data: dict[str, Any] = {
        "findings": [f.to_json() for f in findings],
        "exit": exit_info,
        "rules": rules,
        "failed_rules": failed_rules,
    }
    if processes is not None:  # a run of several processes: who reported, who ended
        data["processes"] = processes
    if simulated:  # ``--simulate cuda``: the devices were simulated
        data["simulated"] = simulated
    if memory is not None:  # check --memory: {device: {peak_bytes, top}}
        data["memory"] = memory
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        json.dump(data, out, indent=2)
        out.write("\n")


def print_memory(memory: dict[str, Any]) -> None:
    """``check --memory``: each device's peak of live tensor memory and its top lines."""
    console = _console()
    if not memory:
        console.print(Text("tensor-dap: no tensor memory seen", style="dim"))
    for device, books in memory.items():
        console.print(
            Text(f"tensor-dap: {device} peak {size_text(books['peak_bytes'])} of live tensors")
        )
        for row in books["top"]:
            where = f"{row['path']}:{row['line']}" if row["line"] else "(library code)"
            try:
                rel = os.path.relpath(row["path"])
                where = f"{rel}:{row['line']}" if not rel.startswith("..") else where
            except ValueError:
                pass
            console.print(
                Text(f"  {size_text(row['bytes']):>10}  {row['count']:>5} tensors  ")
                + Text(where, style="bold")
                + Text(f"  {row['op']}", style="dim")
            )


def warn(message: str) -> None:
    print(f"tensor-dap: {message}", file=sys.stderr)
