"""The static lints on the corpus of real-style code in ``lint_corpus/``: every bug marked
``# expect: CODE`` is found at its line and nothing else is; the correct idioms of ``clean/``
(PyTorch examples, Lightning, Hugging Face loops, GANs, datasets, init functions) get nothing
above a hint; and every quick fix, applied, leaves code that parses and is no longer flagged."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

from tensor_dap.lsp.lints import LINTS, Edit, lint, severity

CORPUS = Path(__file__).parent / "lint_corpus"
BUGS = sorted((CORPUS / "bugs").glob("*.py"))
CLEAN = sorted((CORPUS / "clean").glob("*.py"))
NEW = {
    "softmax-into-cross-entropy",
    "nll-loss-input",
    "eval-without-train",
    "eval-without-no-grad",
    "zero-grad-before-step",
    "loss-accumulated-with-graph",
    "requires-grad-non-leaf",
    "load-without-weights-only",
}


def marked(source: str, marker: str) -> Counter[tuple[int, str]]:
    found: Counter[tuple[int, str]] = Counter()
    for number, line in enumerate(source.splitlines(), 1):
        match = re.search(rf"# {marker}: ([\w, -]+)$", line)
        if match:
            found.update((number, code.strip()) for code in match.group(1).split(","))
    return found


def apply(source: str, edits: tuple[Edit, ...]) -> str:
    """``source`` with ``edits`` (byte columns, all relative to the original) applied."""
    lines = source.encode("utf-8").split(b"\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    data = source.encode("utf-8")
    for edit in sorted(edits, key=lambda e: (e.line, e.col), reverse=True):
        start = offsets[edit.line - 1] + edit.col
        end = offsets[edit.end_line - 1] + edit.end_col
        data = data[:start] + edit.text.encode("utf-8") + data[end:]
    return data.decode("utf-8")


@pytest.mark.parametrize("path", BUGS, ids=lambda p: p.name)
def test_bugs_are_found_at_their_lines(path: Path) -> None:
    source = path.read_text()
    found = Counter((f.line, f.code) for f in lint(source))
    assert found == marked(source, "expect")


@pytest.mark.parametrize("path", CLEAN, ids=lambda p: p.name)
def test_correct_idioms_get_nothing_above_a_hint(path: Path) -> None:
    source = path.read_text()
    found = lint(source)
    assert [(f.line, f.code, f.message) for f in found if severity(f) != "hint"] == []
    assert Counter((f.line, f.code) for f in found) == marked(source, "hint")


def test_every_lint_has_three_bugs_and_the_corpus_five_clean_files() -> None:
    counts = Counter(code for path in BUGS for _, code in marked(path.read_text(), "expect"))
    assert {code for code, n in counts.items() if n >= 3} == {spec.code for spec in LINTS}
    assert len(CLEAN) >= 5
    assert {spec.code for spec in LINTS} >= NEW


@pytest.mark.parametrize("path", BUGS, ids=lambda p: p.name)
def test_quick_fixes_leave_code_that_parses_and_is_clean(path: Path) -> None:
    source = path.read_text()
    fixed = 0
    for found in lint(source):
        if not found.edits:
            continue
        after = apply(source, found.edits)
        ast.parse(after)
        fixed += 1
        lines_before = len(source.splitlines())
        shift = len(after.splitlines()) - lines_before
        still = [
            f
            for f in lint(after)
            if f.code == found.code and f.line in (found.line, found.line + shift)
        ]
        assert still == [], (found.code, found.line, after)
    assert fixed > 0


def test_the_docs_list_every_lint() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "language-server.md").read_text()
    rows = set(re.findall(r"^\| `([a-z-]+)` \|", docs, re.MULTILINE))
    assert rows == {spec.code for spec in LINTS}
