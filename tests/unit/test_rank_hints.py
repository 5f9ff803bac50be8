"""Inlay hints of a line that several processes (ranks, workers) ran: one value shown, what the
others saw differently spelled out — read from a real trace store file."""

from __future__ import annotations

import pathlib

from lsprotocol import types

from tensor_dap.lsp.inlay_hints import inlay_hints
from tensor_dap.lsp.store import TraceStore
from tensor_dap.tracedb import Observation, TraceWriter, text_digest

TEXT = "import torch\nbatch = next(it)\nloss = model(batch)\n"


def labels(tmp_path: pathlib.Path, observations: list[Observation]) -> list[str]:
    source = tmp_path / "train.py"
    source.write_text(TEXT)
    db = tmp_path / "trace.db"
    with TraceWriter(db) as writer:
        run = writer.begin_run("check", ["train.py"], str(tmp_path))
        for obs in observations:
            obs.path = str(source)
        writer.add_observations(run, observations)
        writer.record_source(str(source), text_digest(TEXT), run, TEXT)
    store = TraceStore(db)
    try:
        data = store.file(str(source))
    finally:
        store.close()
    whole = types.Range(start=types.Position(0, 0), end=types.Position(3, 0))
    found = inlay_hints(data, TEXT.splitlines(keepends=True), text_digest(TEXT), whole)
    return [hint["label"] for hint in found]


def batch(process: str, shape: tuple[int, ...], device: str = "cuda:0") -> Observation:
    return Observation("", 2, "batch", shape, "torch.float32", device, False, None, process=process)


def test_ranks_that_agree_show_one_value(tmp_path: pathlib.Path) -> None:
    rows = [batch("rank 0", (32, 10)), batch("rank 1", (32, 10))]
    assert labels(tmp_path, rows) == ["(32, 10) f32 cuda:0"]


def test_a_rank_that_disagrees_is_named_with_what_differs(tmp_path: pathlib.Path) -> None:
    rows = [batch("rank 0", (32, 10)), batch("rank 1", (31, 10)), batch("rank 2", (32, 10), "cpu")]
    assert labels(tmp_path, rows) == ["(32, 10) f32 cuda:0 · rank 1: (31, 10) · rank 2: cpu"]


def test_the_main_process_is_shown_first_and_many_disagreements_are_counted(
    tmp_path: pathlib.Path,
) -> None:
    rows = [batch(f"worker {i}", (i + 1, 10)) for i in range(5)] + [batch("main", (8, 10))]
    assert labels(tmp_path, rows) == [
        "(8, 10) f32 cuda:0 · worker 0: (1, 10) · worker 1: (2, 10) · worker 2: (3, 10) · +2 more"
    ]
