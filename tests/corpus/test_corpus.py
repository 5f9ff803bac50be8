"""Every corpus program, clean and with each bug variant, under ``tensor-dap check --rules all``.

A clean run must give no finding and exit 0; a variant must give exactly the findings its
``# bug[VARIANT]: RULE`` markers name, at their lines. Every run must leave the program as it
is: the same stdout as ``python PROGRAM [VARIANT]``, the same exception type when that raises,
and exit status 1 when something was found or the program failed (``tests/corpus/README.md``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tensor_dap import catalog
from tests.corpus.catalog import CLEAN, Case, cases, exception_type

CASES = cases()


def test_corpus_size() -> None:
    programs = {case.program for case in CASES}
    variants = [case for case in CASES if case.variant != CLEAN]
    rules = {rule for case in variants for rule, _ in case.expected}
    assert len(programs) >= 20
    assert len(variants) >= 40
    # every rule has a bug in the corpus, but one needing an option (--memory-limit) that the
    # corpus' `--rules all` runs do not give
    assert rules == {r.id for r in catalog.RULES if not r.needs_option}, rules


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_program(case: Case, check, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    plain = subprocess.run(
        [sys.executable, str(case.program), *case.args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
    )
    run = check(case.program, *case.args, rules="all")
    messages = [f"{f['rule']}:{f['line']} {f['message']}" for f in run.findings]

    assert run.pairs() == set(case.expected), "\n".join(messages) or run.stderr[-3000:]
    assert run.stdout == plain.stdout
    exception = (run.report["exit"].get("exception") or "").split(":", 1)[0]
    assert exception.rsplit(".", 1)[-1] == (
        exception_type(plain.stderr) if plain.returncode else ""
    )
    if case.variant == CLEAN:
        assert plain.returncode == 0, plain.stderr[-3000:]
        assert run.returncode == 0, run.stderr[-3000:]
    elif run.findings or plain.returncode:
        assert run.returncode == 1
