"""Matching an edited document's lines to the lines a run saw (tensor_dap.lsp.alignment)."""

from __future__ import annotations

from tensor_dap.findings import Finding
from tensor_dap.lsp.alignment import aligned, line_map
from tensor_dap.lsp.store import FileData
from tensor_dap.tracedb import text_digest

RUN_TEXT = "a = f()\nb = g(a)\n\nc = a + b\nprint(c)\n"


def row(line: int, name: str) -> tuple:
    # the store's row layout (tensor_dap.lsp.store._COLUMNS)
    return (None, line, name, "[2]", "torch.float32", "cpu", 0, None, 1, 0, "main", 7, 1)


def data() -> FileData:
    rows = [row(1, "a"), row(2, "b"), row(4, "c")]
    finding = Finding("broadcast", "/p/x.py", 4, "c broadcasts")
    return FileData(rows, [finding], text_digest(RUN_TEXT), "/p/x.py", RUN_TEXT)


def test_unchanged_lines_keep_their_place_and_follow_insertions() -> None:
    old = RUN_TEXT.splitlines()
    assert line_map(old, old) == {1: 1, 2: 2, 3: 3, 4: 4, 5: 5}
    inserted = ["import os", *old[:2], "x = 0", *old[2:]]
    assert line_map(old, inserted) == {1: 2, 2: 3, 3: 5, 4: 6, 5: 7}


def test_edited_and_deleted_lines_drop_out() -> None:
    old = RUN_TEXT.splitlines()
    edited = [old[0], "b = g(a, 2)", *old[2:]]
    assert line_map(old, edited) == {1: 1, 3: 3, 4: 4, 5: 5}
    deleted = [old[0], *old[2:]]
    assert line_map(old, deleted) == {1: 1, 3: 2, 4: 3, 5: 4}
    assert line_map(old, []) == {}


def test_line_endings_do_not_count_as_edits() -> None:
    old = RUN_TEXT.splitlines(keepends=True)
    crlf = [line.replace("\n", "\r\n") for line in old]
    assert line_map(old, crlf) == {1: 1, 2: 2, 3: 3, 4: 4, 5: 5}


def test_aligned_moves_rows_and_findings_and_drops_edited_ones() -> None:
    stored = data()
    assert aligned(stored, RUN_TEXT.splitlines(), text_digest(RUN_TEXT)) is stored
    text = "import os\n" + RUN_TEXT.replace("b = g(a)", "b = g(a) * 2")
    view = aligned(stored, text.splitlines(), text_digest(text))
    assert sorted(view.by_line) == [2, 5]
    assert [o.name for o in view.by_line[5]] == ["c"]
    assert [(f.rule, f.line) for f in view.findings] == [("broadcast", 5)]
    assert aligned(stored, text.splitlines(), text_digest(text)) is view  # kept for this text


def test_unknown_run_text_shows_no_hints_but_keeps_findings() -> None:
    stored = data()
    stored.source_text = None
    text = "import os\n" + RUN_TEXT
    view = aligned(stored, text.splitlines(), text_digest(text))
    assert len(view.by_line) == 0
    assert [f.line for f in view.findings] == [4]
