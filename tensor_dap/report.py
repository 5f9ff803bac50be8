"""Findings for people (stderr, with rich) and for programs (the JSON report)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from typing import Any, Optional

from rich.console import Console
from rich.text import Text

from tensor_dap.agent.findings import Finding


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
    parts = [
        f"{key} {finding.process[key]}" for key in ("rank", "worker") if key in finding.process
    ]
    return f" [{', '.join(parts)}]" if parts else ""


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


def print_summary(findings: list[Finding], counts: dict[tuple[str, str, int], int]) -> None:
    console = _console()
    if not findings:
        console.print(Text("tensor-dap: no findings", style="green"))
        return
    console.print(Text(f"\ntensor-dap: {len(findings)} finding(s)", style="bold"))
    for finding in findings:
        line = format_finding(finding)
        times = counts.get((finding.rule, finding.path, finding.line), 1)
        if times > 1:
            line.append(f"  (×{times})", style="dim")
        console.print(line)


def write_json_report(
    path: str,
    findings: Iterable[Finding],
    exit_info: dict[str, Any],
    rules: list[str],
    failed_rules: dict[str, str],
) -> None:
    data = {
        "findings": [f.to_json() for f in findings],
        "exit": exit_info,
        "rules": rules,
        "failed_rules": failed_rules,
    }
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        json.dump(data, out, indent=2)
        out.write("\n")


def warn(message: str) -> None:
    print(f"tensor-dap: {message}", file=sys.stderr)
