"""The corpus of realistic training programs and the bugs injected into them.

Every ``programs/*.py`` is clean when run without arguments and takes an optional bug variant as
its first argument. The line where tensor-dap must report a variant's bug carries one trailing
marker ``# bug[VARIANT]: RULE-ID`` (``# bug[A,B]: RULE-ID`` when two variants are reported on
the same line). This module reads the markers; the test (``test_corpus.py``) and the benchmark
(``benchmarks/recall.py``) both take the list of runs from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PROGRAMS = Path(__file__).resolve().parent / "programs"
CLEAN = ""
"""The variant name of a program's clean run (no argument)."""

_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")
_MARKER = re.compile(r"#\s*bug\[([a-z0-9,\s-]+)\]:\s*([a-z-]+)\s*$")


@dataclass(frozen=True)
class Case:
    """One run: a program and a variant (``CLEAN`` for none) with the findings it must give."""

    program: Path
    variant: str
    expected: frozenset[tuple[str, int]]

    @property
    def args(self) -> tuple[str, ...]:
        return (self.variant,) if self.variant else ()

    @property
    def name(self) -> str:
        return f"{self.program.stem}[{self.variant or 'clean'}]"


def exception_type(stderr: str) -> str:
    """The exception type (``RuntimeError``) of the last Python traceback in ``stderr``; '' when
    there is none. Lines a ``torch.distributed`` process prefixes with ``[rankN]: `` count too."""
    lines = [_RANK_PREFIX.sub("", line) for line in stderr.splitlines()]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if not starts:
        return ""
    for line in lines[starts[-1] + 1 :]:
        if line and not line[0].isspace():
            return line.split(":", 1)[0].rsplit(".", 1)[-1]
    return ""


def markers(program: Path) -> dict[str, set[tuple[str, int]]]:
    """Variant -> {(rule, line)} from the ``# bug[...]`` markers of ``program``."""
    variants: dict[str, set[tuple[str, int]]] = {}
    for number, text in enumerate(program.read_text().splitlines(), start=1):
        match = _MARKER.search(text)
        if match:
            for variant in match.group(1).split(","):
                variants.setdefault(variant.strip(), set()).add((match.group(2), number))
    return variants


def programs(filters: tuple[str, ...] = ()) -> list[Path]:
    """The corpus programs, sorted; ``filters``: keep those whose name contains one of them."""
    found = sorted(PROGRAMS.glob("*.py"))
    return [p for p in found if not filters or any(f in p.stem for f in filters)]


def cases(filters: tuple[str, ...] = ()) -> list[Case]:
    """Every (program, variant) run, each program's clean run first."""
    runs = []
    for program in programs(filters):
        runs.append(Case(program, CLEAN, frozenset()))
        for variant, expected in sorted(markers(program).items()):
            runs.append(Case(program, variant, frozenset(expected)))
    return runs
