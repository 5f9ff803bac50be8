"""Recall and false alarms on the bug corpus: ``python benchmarks/recall.py [NAME ...]``.

Runs every program of ``tests/corpus/programs`` (or those whose name contains one of NAME) clean
and with each of its bug variants, once with plain ``python`` and once under ``tensor-dap check
--rules all``, side by side, and prints per program:

- ``variants``: bug variants run; ``found``: variants whose every expected finding was reported at
  its marked line; ``missed``: the others;
- ``false``: findings at no marked (rule, line) of the run, clean runs included;
- ``same``: runs whose stdout and exit (status 0 or not, exception type) were those of plain
  Python;
- ``ratio``: median wall-time ratio check / plain over the program's runs (each pair timed back
  to back, so a busy machine slows both sides alike; interpreter and torch start-up included).

then the totals: recall (found / variants) and false alarms. ``-v`` lists each miss and false
alarm. Why: the sample project shows each rule on a script written for it; this measures what a
user gets on programs written the way PyTorch programs are written, with the bugs people make.
The expected findings come from the ``# bug[VARIANT]: RULE`` markers (``tests/corpus/catalog.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.corpus.catalog import Case, cases, exception_type  # noqa: E402


@dataclass
class Outcome:
    case: Case
    found: set[tuple[str, int]]
    messages: dict[tuple[str, int], str]
    same: bool
    plain_exit: str
    plain_s: float
    check_s: float
    exit: dict[str, Any]

    @property
    def missed(self) -> set[tuple[str, int]]:
        return set(self.case.expected) - self.found

    @property
    def false_alarms(self) -> set[tuple[str, int]]:
        return self.found - set(self.case.expected)

    def line(self) -> str:
        """One line for this run: what was found, missed and added, and whether it ran the same."""
        flags = f"missed {sorted(self.missed)} " if self.missed else ""
        flags += f"false {sorted(self.false_alarms)} " if self.false_alarms else ""
        return (
            f"{self.case.name}: {flags or 'as marked '}{'same' if self.same else 'CHANGED'}"
            f" (plain {self.plain_s:.1f} s, check {self.check_s:.1f} s)"
        )


def run_case(case: Case, timeout: float) -> Outcome:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory() as tmp:
        plain_cmd = [sys.executable, str(case.program), *case.args]
        start = time.perf_counter()
        plain = subprocess.run(
            plain_cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp, env=env
        )
        plain_s = time.perf_counter() - start
        report = Path(tmp) / "report.json"
        check_cmd = [sys.executable, "-m", "tensor_dap", "check", "--rules", "all"]
        check_cmd += ["--report", str(report), "--trace", str(Path(tmp) / "trace.db")]
        start = time.perf_counter()
        checked = subprocess.run(
            [*check_cmd, str(case.program), *case.args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=tmp,
            env=env,
        )
        check_s = time.perf_counter() - start
        data = json.loads(report.read_text()) if report.exists() else {}
    findings = data.get("findings", [])
    found = {(f["rule"], f["line"]) for f in findings}
    messages = {(f["rule"], f["line"]): f["message"] for f in findings}
    exit_info = data.get("exit", {})
    exception = (exit_info.get("exception") or "").split(":", 1)[0].rsplit(".", 1)[-1]
    same = (
        plain.stdout == checked.stdout
        and (plain.returncode == 0) == (exit_info.get("status") == "ok")
        and (exception_type(plain.stderr) if plain.returncode else "") == exception
    )
    plain_exit = f"{plain.returncode} {exception_type(plain.stderr)}".strip()
    if plain.returncode < 0:  # killed by a signal: what it said last
        plain_exit += f" ({plain.stderr.strip().splitlines()[-1:]})"
    return Outcome(case, found, messages, same, plain_exit, plain_s, check_s, exit_info)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="only programs whose name contains one of these")
    parser.add_argument("-v", "--verbose", action="store_true", help="list misses and alarms")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="runs in parallel (default 1)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    args = parser.parse_args()

    runs = cases(tuple(args.names))
    if not runs:
        parser.error("no program matches")
    outcomes = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        pending = [pool.submit(run_case, case, args.timeout) for case in runs]
        # each run as it ends (stderr): a run cut short by a time limit keeps what had ended
        for number, done in enumerate(as_completed(pending), start=1):
            outcome = done.result()
            print(f"[{number}/{len(runs)}] {outcome.line()}", file=sys.stderr, flush=True)
    outcomes = [future.result() for future in pending]

    header = f"{'program':<26} {'variants':>8} {'found':>6} {'missed':>6} {'false':>6}"
    header += f" {'same':>7} {'ratio':>6}"
    print(header)
    print("-" * len(header))
    totals = {"variants": 0, "found": 0, "false": 0, "same": 0, "runs": 0}
    by_program: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        by_program.setdefault(outcome.case.program.stem, []).append(outcome)
    for program, group in by_program.items():
        bugs = [o for o in group if o.case.variant]
        found = sum(1 for o in bugs if not o.missed)
        false = sum(len(o.false_alarms) for o in group)
        same = sum(1 for o in group if o.same)
        ratio = statistics.median(o.check_s / o.plain_s for o in group)
        print(
            f"{program:<26} {len(bugs):>8} {found:>6} {len(bugs) - found:>6} {false:>6}"
            f" {same:>3}/{len(group):<3} {ratio:>6.2f}"
        )
        totals["variants"] += len(bugs)
        totals["found"] += found
        totals["false"] += false
        totals["same"] += same
        totals["runs"] += len(group)
    print("-" * len(header))
    recall = 100.0 * totals["found"] / max(1, totals["variants"])
    print(
        f"recall {recall:.1f}% ({totals['found']}/{totals['variants']} variants), "
        f"{totals['false']} false alarm(s), output/exit unchanged in "
        f"{totals['same']}/{totals['runs']} runs"
    )
    if args.verbose:
        for outcome in outcomes:
            for rule, line in sorted(outcome.missed):
                print(f"MISSED {outcome.case.name}: {rule} at line {line}")
            for key in sorted(outcome.false_alarms):
                rule, line = key
                print(f"FALSE  {outcome.case.name}: {rule} at line {line}: {outcome.messages[key]}")
            if not outcome.same:
                print(
                    f"CHANGED {outcome.case.name}: plain exit {outcome.plain_exit}, "
                    f"check exit {outcome.exit}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
