"""The trace store on real SQLite files: upserts, findings, pruning, damaged files, and several
processes writing at once while a reader reads."""

from __future__ import annotations

import json
import multiprocessing
import os
import pathlib
import shutil
import sqlite3
import sys

import pytest

from tensor_dap.findings import Finding, TensorInfo
from tensor_dap.tracedb import (
    MAX_RUNS_KEPT,
    Observation,
    TraceReader,
    TraceStoreError,
    TraceWriter,
    default_trace_path,
    process_label,
    run_command,
    text_digest,
)
from tensor_dap.tracedb.schema import SCHEMA_VERSION

SCRIPT = "/project/train.py"


def obs(line: int, name: str = "x", shape: tuple[int, ...] = (2, 3), **kw: object) -> Observation:
    fields: dict = dict(dtype="torch.float32", device="cpu", requires_grad=False, grad_fn=None)
    fields.update(kw)
    return Observation(path=SCRIPT, line=line, name=name, shape=shape, **fields)


def finding(rule: str = "grad-lost", line: int = 7, **kw: object) -> Finding:
    data: dict = {
        "rule": rule,
        "path": SCRIPT,
        "line": line,
        "message": f"{rule} at line {line}",
        "tensors": [{"name": "w", "shape": [4, 4], "dtype": "torch.float32", "device": "cpu"}],
        "process": {},
    }
    data.update(kw)
    return Finding.from_json(data)


@pytest.fixture
def db(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / ".tensor-dap" / "trace.db"


@pytest.fixture
def writer(db: pathlib.Path):
    w = TraceWriter(db)
    yield w
    w.close()


def test_writer_creates_the_folder_in_wal_mode(db: pathlib.Path, writer: TraceWriter) -> None:
    assert db.is_file()
    assert (db.parent / ".gitignore").read_text().strip().endswith("*")
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        assert version == (str(SCHEMA_VERSION),)
    finally:
        conn.close()


def test_upsert_keeps_one_row_per_key_and_adds_hits(db: pathlib.Path, writer: TraceWriter) -> None:
    run = writer.begin_run("check", ["train.py"], "/project")
    writer.add_observations(run, [obs(3), obs(3), obs(4, "y")])
    writer.add_observations(
        run, [obs(3, device="cuda:0", requires_grad=True, grad_fn="MulBackward0")]
    )
    writer.add_observations(run, [obs(3, process="rank 1", hits=5)])

    with TraceReader(db) as reader:
        rows = reader.observations_for(SCRIPT)
    assert [(o.line, o.name, o.process) for o in rows] == [
        (3, "x", "main"),
        (3, "x", "rank 1"),
        (4, "y", "main"),
    ]
    main = rows[0]
    assert main.hits == 3
    assert (main.device, main.requires_grad, main.grad_fn) == ("cuda:0", True, "MulBackward0")
    assert main.shape == (2, 3) and main.last_run_id == run and not main.shape_varied
    assert rows[1].hits == 5
    assert rows[2].hits == 1


def test_upsert_across_runs_and_column(db: pathlib.Path, writer: TraceWriter) -> None:
    first = writer.begin_run("check", [], "/project")
    writer.add_observations(first, [obs(3, col=12)])
    second = writer.begin_run("check", [], "/project")
    writer.add_observations(second, [obs(3, dtype="torch.float16")])
    with TraceReader(db) as reader:
        (row,) = reader.observations_for(SCRIPT)
        assert reader.observations_for("/elsewhere.py") == []
    assert (row.hits, row.dtype, row.col, row.last_run_id) == (2, "torch.float16", 12, second)


def test_a_simulated_run_says_so(db: pathlib.Path, writer: TraceWriter) -> None:
    plain = writer.begin_run(run_command("check"), [], "/project")
    simulated = writer.begin_run(run_command("check", "cuda"), [], "/project")
    with TraceReader(db) as reader:
        assert reader.simulated_runs() == {simulated: "cuda"}  # not the plain run
        latest = reader.latest_run()
    assert latest is not None and latest.command == "check --simulate cuda"
    assert latest.simulated == "cuda" and plain != simulated


def test_shape_varied(db: pathlib.Path, writer: TraceWriter) -> None:
    run = writer.begin_run("check", [], "/project")
    writer.add_observations(run, [obs(1, shape=(8, 3)), obs(2, shape=(8, 3))])
    writer.add_observations(run, [obs(1, shape=(8, 3))])
    with TraceReader(db) as reader:
        assert [o.shape_varied for o in reader.observations_for(SCRIPT)] == [False, False]

    # A later run sees another shape: varied from then on, even when the old shape returns.
    later = writer.begin_run("check", [], "/project")
    writer.add_observations(later, [obs(1, shape=(5, 3))])
    writer.add_observations(later, [obs(1, shape=(8, 3))])
    # Within one batch, too.
    writer.add_observations(later, [obs(2, shape=(8, 3)), obs(2, shape=())])
    with TraceReader(db) as reader:
        one, two = reader.observations_for(SCRIPT)
    assert (one.shape, one.shape_varied, one.hits) == ((8, 3), True, 4)
    assert (two.shape, two.shape_varied, two.hits) == ((), True, 3)


def test_findings_round_trip(db: pathlib.Path, writer: TraceWriter) -> None:
    old = writer.begin_run("check", ["train.py"], "/project")
    writer.add_findings(old, [finding("nan-inf", 2)])
    run = writer.begin_run("check", ["train.py", "--fast"], "/project")
    tensors = [
        {"name": "x", "shape": [8, 3], "dtype": "torch.float32", "device": "cuda:0"},
        {"name": "w", "shape": [3], "dtype": "torch.float32", "device": "cpu", "origin": None},
    ]
    writer.add_findings(
        run,
        [
            finding("device-mismatch", 9, tensors=tensors, process={"rank": 1}),
            finding("grad-lost", 4, path="/project/other.py", process={"worker": 0}),
            finding("grad-lost", 4, path="/project/other.py", process={"worker": 0}),  # repeated
        ],
    )
    writer.end_run(run, {"code": 1, "reason": "findings"})

    with TraceReader(db) as reader:
        everything = reader.findings_for()
        mine = reader.findings_for(SCRIPT)
        older = reader.findings_for(SCRIPT, run_id=old)
        latest = reader.latest_run()
    assert [(f.path, f.rule, f.tag) for f in everything] == [
        ("/project/other.py", "grad-lost", "worker 0"),
        (SCRIPT, "device-mismatch", "rank 1"),
    ]
    (found,) = mine
    assert (found.line, found.message) == (9, "device-mismatch at line 9")
    assert found.tensors == [TensorInfo.from_json(t) for t in tensors]
    with sqlite3.connect(db) as conn:  # on disk: the tensors as Finding.to_json writes them
        (stored,) = conn.execute("SELECT tensors_json FROM findings WHERE line = 9").fetchone()
    assert json.loads(stored) == [
        dict(t, requires_grad=False, grad_fn=None, origin=None) for t in tensors
    ]
    assert [f.rule for f in older] == ["nan-inf"]
    assert latest is not None
    assert (latest.run_id, latest.command, latest.argv, latest.cwd) == (
        run,
        "check",
        ["train.py", "--fast"],
        "/project",
    )
    assert latest.ended is not None and latest.ended >= latest.started
    assert json.loads(latest.exit_json or "null") == {"code": 1, "reason": "findings"}


def test_a_damaged_finding_row_is_left_out_with_a_warning(
    db: pathlib.Path, writer: TraceWriter, caplog: pytest.LogCaptureFixture
) -> None:
    run = writer.begin_run("check", ["train.py"], "/project")
    writer.add_findings(run, [finding("grad-lost", 3), finding("broadcast", 5)])
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE findings SET tensors_json = '[{\"name\": 1' WHERE line = 3")
        conn.execute("UPDATE findings SET line = 'x' WHERE line = 5")
    writer.add_findings(run, [finding("nan-inf", 8)])
    with TraceReader(db) as reader:
        found = reader.findings_for(SCRIPT)
    assert [(f.rule, f.line) for f in found] == [("nan-inf", 8)]
    warnings = [r.getMessage() for r in caplog.records]
    assert any("the tensors of a finding are not JSON" in w for w in warnings), warnings
    assert any("'line' is 'x', not an integer" in w for w in warnings), warnings


def test_findings_of_old_runs_are_pruned(db: pathlib.Path, writer: TraceWriter) -> None:
    runs = []
    for i in range(MAX_RUNS_KEPT + 5):
        run = writer.begin_run("check", [], "/project")
        writer.add_findings(run, [finding(line=i + 1)])
        writer.end_run(run, {"code": 1})
        runs.append(run)
    conn = sqlite3.connect(db)
    try:
        kept = [r for (r,) in conn.execute("SELECT DISTINCT run_id FROM findings ORDER BY 1")]
        run_rows = conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    finally:
        conn.close()
    assert kept == runs[-MAX_RUNS_KEPT:]
    assert run_rows == MAX_RUNS_KEPT
    with TraceReader(db) as reader:
        assert reader.findings_for(run_id=runs[0]) == []
        assert [f.line for f in reader.findings_for()] == [len(runs)]
        latest = reader.latest_run()
        assert latest is not None and latest.run_id == runs[-1]


def test_reader_on_a_missing_file(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "nothing" / "trace.db"
    reader = TraceReader(db)
    assert not reader.available
    assert reader.observations_for(SCRIPT) == []
    assert reader.findings_for() == []
    assert reader.latest_run() is None
    assert reader.source_digest(SCRIPT) is None
    assert reader.data_version() == 0
    assert not db.exists(), "the reader must not create the store"

    # The store appears later: the same reader follows it.
    with TraceWriter(db) as writer:
        run = writer.begin_run("check", [], str(tmp_path))
        writer.add_observations(run, [obs(1)])
    assert reader.available
    assert [o.line for o in reader.observations_for(SCRIPT)] == [1]
    assert reader.data_version() != 0
    reader.close()


def test_corrupt_file_raises_trace_store_error(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "trace.db"
    db.write_bytes(b"this is not sqlite at all\x00\xff" * 300)
    with pytest.raises(TraceStoreError, match="corrupt or not an SQLite database"):
        TraceReader(db)
    with pytest.raises(TraceStoreError, match="corrupt or not an SQLite database"):
        TraceWriter(db)


def test_truncated_file_raises_trace_store_error(tmp_path: pathlib.Path) -> None:
    good = tmp_path / "good.db"
    with TraceWriter(good) as writer:
        run = writer.begin_run("check", [], str(tmp_path))
        writer.add_observations(run, [obs(i, f"v{j}") for i in range(500) for j in range(5)])
    assert not pathlib.Path(f"{good}-wal").exists(), "closing the last writer checkpoints"
    size = good.stat().st_size
    assert size > 100_000

    for cut in (size // 2, 4096 + 100):
        bad = tmp_path / f"cut-{cut}.db"
        shutil.copy(good, bad)
        with open(bad, "r+b") as handle:
            handle.truncate(cut)
        with pytest.raises(TraceStoreError, match=str(bad)):
            reader = TraceReader(bad)
            reader.observations_for(SCRIPT)


def test_foreign_or_newer_database_raises(tmp_path: pathlib.Path) -> None:
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE users (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(TraceStoreError, match="not a tensor-dap trace store"):
        TraceReader(foreign)
    with pytest.raises(TraceStoreError, match="not a tensor-dap trace store"):
        TraceWriter(foreign)

    newer = tmp_path / "newer.db"
    TraceWriter(newer).close()
    conn = sqlite3.connect(newer)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(TraceStoreError, match="newer tensor-dap"):
        TraceReader(newer)
    with pytest.raises(TraceStoreError, match="newer tensor-dap"):
        TraceWriter(newer)


def test_reader_reads_during_a_write_transaction(db: pathlib.Path, writer: TraceWriter) -> None:
    run = writer.begin_run("check", [], "/project")
    writer.add_observations(run, [obs(1)])
    reader = TraceReader(db)
    before = reader.data_version()

    other = sqlite3.connect(db, isolation_level=None)  # another process's writer, mid-commit
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("UPDATE observations SET hits = 999")
        other.execute("UPDATE meta SET value = '1' WHERE key = 'change_counter'")
        (row,) = reader.observations_for(SCRIPT)
        assert row.hits == 1, "the reader sees the last committed state"
        assert reader.data_version() == before
        assert reader.latest_run() is not None
        other.execute("COMMIT")
    finally:
        other.close()
    (row,) = reader.observations_for(SCRIPT)
    assert row.hits == 999
    assert reader.data_version() != before
    reader.close()


def test_data_version_changes_after_each_commit(db: pathlib.Path, writer: TraceWriter) -> None:
    reader = TraceReader(db)
    seen = [reader.data_version()]
    assert reader.data_version() == seen[0], "stable while nothing is written"
    run = writer.begin_run("check", [], "/project")
    seen.append(reader.data_version())
    writer.add_observations(run, [obs(1)])
    seen.append(reader.data_version())
    writer.add_findings(run, [finding()])
    seen.append(reader.data_version())
    writer.record_source(SCRIPT, text_digest("x = 1\n"), run)
    seen.append(reader.data_version())
    writer.end_run(run, {"code": 0})
    seen.append(reader.data_version())
    assert len(set(seen)) == len(seen)
    reader.close()


def test_source_digest_and_stale_observations(db: pathlib.Path, writer: TraceWriter) -> None:
    assert text_digest("a\r\nb\n") == text_digest("a\nb\n")
    first = writer.begin_run("check", [], "/project")
    writer.record_source(SCRIPT, text_digest("v1"), first)
    writer.add_observations(first, [obs(1), obs(2)])
    second = writer.begin_run("check", [], "/project")
    writer.add_observations(second, [obs(2)])
    writer.record_source(SCRIPT, text_digest("v1"), second)  # unchanged: nothing dropped
    with TraceReader(db) as reader:
        assert reader.source_digest(SCRIPT) == text_digest("v1")
        assert [o.line for o in reader.observations_for(SCRIPT)] == [1, 2]

    third = writer.begin_run("check", [], "/project")
    writer.add_observations(third, [obs(5)])
    writer.record_source(SCRIPT, text_digest("v2"), third)  # edited: older rows are stale
    with TraceReader(db) as reader:
        assert reader.source_digest(SCRIPT) == text_digest("v2")
        assert [o.line for o in reader.observations_for(SCRIPT)] == [5]
        assert reader.source_digest("/project/unseen.py") is None


def test_default_trace_path(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TENSOR_DAP_TRACE", raising=False)
    assert default_trace_path(str(tmp_path)) == tmp_path / ".tensor-dap" / "trace.db"
    monkeypatch.chdir(tmp_path)
    assert default_trace_path() == tmp_path / ".tensor-dap" / "trace.db"
    monkeypatch.setenv("TENSOR_DAP_TRACE", str(tmp_path / "custom.db"))
    assert default_trace_path("/somewhere/else") == tmp_path / "custom.db"
    monkeypatch.setenv("TENSOR_DAP_TRACE", "rel/trace.db")
    assert default_trace_path(str(tmp_path)) == tmp_path / "rel" / "trace.db"


def test_process_label() -> None:
    assert process_label("rank 1") == "rank 1"
    assert process_label({}) == "main"
    assert process_label(None) == "main"
    assert process_label({"rank": 1}) == "rank 1"
    assert process_label({"worker": 0}) == "worker 0"
    assert process_label({"rank": 2, "worker_id": 3}) == "rank 2 worker 3"
    assert process_label({"label": "rank 0", "rank": 0}) == "rank 0"


# -- several processes ------------------------------------------------------------------------

ROWS_PER_PROCESS = 200
BATCH = 20
PASSES = 2


def _write_concurrently(db: str, index: int, barrier) -> None:  # runs in a spawned process
    label = f"worker {index}"
    writer = TraceWriter(db)
    run = writer.begin_run("check", ["train.py", str(index)], "/project")
    barrier.wait()
    for _ in range(PASSES):
        for start in range(0, ROWS_PER_PROCESS, BATCH):
            batch = [
                obs(line, shape=(index, line), process=label)
                for line in range(start, start + BATCH)
            ]
            shared = Observation(SCRIPT, 10_000, "loss", (), "torch.float32", "cpu", True, None)
            writer.add_observations(run, [*batch, shared])
        writer.add_findings(run, [finding(line=index + 1, process={"worker": index})])
    writer.end_run(run, {"code": 0})
    writer.close()


def test_concurrent_writers_from_several_processes(db: pathlib.Path) -> None:
    TraceWriter(db).close()
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_write_concurrently, args=(str(db), i, barrier)) for i in range(4)]
    for proc in procs:
        proc.start()
    reader = TraceReader(db)
    while any(p.is_alive() for p in procs):  # read while they write: never an error
        reader.observations_for(SCRIPT)
        reader.data_version()
        for p in procs:
            p.join(timeout=0.01)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]

    rows = reader.observations_for(SCRIPT)
    per_process = [r for r in rows if r.process.startswith("worker ")]
    assert len(per_process) == 4 * ROWS_PER_PROCESS
    assert {(r.process, r.line) for r in per_process} == {
        (f"worker {i}", line) for i in range(4) for line in range(ROWS_PER_PROCESS)
    }
    assert all(r.hits == PASSES and r.shape == (int(r.process[-1]), r.line) for r in per_process)
    (shared,) = [r for r in rows if r.name == "loss"]
    assert shared.hits == 4 * PASSES * (ROWS_PER_PROCESS // BATCH)
    assert shared.process == "main"
    reader.close()

    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert (
            conn.execute("SELECT COUNT(*) FROM runs WHERE ended IS NOT NULL").fetchone()[0] == 5 - 1
        )
        assert conn.execute("SELECT COUNT(*) FROM findings").fetchone()[0] == 4
    finally:
        conn.close()


def _write_after_fork(writer: TraceWriter, run: int) -> None:  # runs in a forked process
    writer.add_observations(run, [obs(2, process="worker 0")])
    writer.close()


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs fork")
def test_writer_inherited_by_a_forked_worker(db: pathlib.Path, writer: TraceWriter) -> None:
    run = writer.begin_run("check", [], "/project")
    writer.add_observations(run, [obs(1)])
    proc = multiprocessing.get_context("fork").Process(target=_write_after_fork, args=(writer, run))
    proc.start()
    proc.join(timeout=60)
    assert proc.exitcode == 0
    writer.add_observations(run, [obs(1)])  # the parent's connection still works
    with TraceReader(db) as reader:
        rows = reader.observations_for(SCRIPT)
    assert [(r.line, r.process, r.hits) for r in rows] == [(1, "main", 2), (2, "worker 0", 1)]


def test_source_text_is_kept_and_a_version_1_store_is_migrated(db: pathlib.Path) -> None:
    # a store as tensor-dap 0.1 wrote it: schema version 1, no `text` column in `sources`
    TraceWriter(db).close()
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE sources DROP COLUMN text")
    conn.execute("ALTER TABLE observations DROP COLUMN summary")
    conn.execute("ALTER TABLE observations DROP COLUMN detail")
    conn.execute("INSERT INTO sources VALUES (?, ?, NULL, 0)", (SCRIPT, text_digest("old")))
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with TraceReader(db) as reader:  # a reader of the old store: the text is simply unknown
        assert reader.source_digest(SCRIPT) == text_digest("old")
        assert reader.source_text(SCRIPT) is None
    with TraceWriter(db) as writer:
        run = writer.begin_run("check", ["train.py"], "/project")
        writer.record_source(SCRIPT, text_digest("x = 1\n"), run, "x = 1\n")
        writer.record_source("/project/huge.py", "d", run, "#" * 3_000_000)
    with TraceReader(db) as reader:
        assert reader.source_text(SCRIPT) == "x = 1\n"
        assert reader.source_text("/project/huge.py") is None
        assert reader.source_digest("/project/huge.py") == "d"
    conn = sqlite3.connect(db)
    version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),)
    conn.close()


def test_a_version_2_store_opens_and_gains_value_summaries(db: pathlib.Path) -> None:
    # a store as tensor-dap wrote it before modules and containers were described
    with TraceWriter(db) as writer:
        writer.add_observations(writer.begin_run("check", [], "/project"), [obs(3)])
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE observations DROP COLUMN summary")
    conn.execute("ALTER TABLE observations DROP COLUMN detail")
    conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with TraceReader(db) as reader:  # read before any writer migrated it
        [row] = reader.observations_for(SCRIPT)
        assert (row.line, row.shape, row.summary, row.detail) == (3, (2, 3), None, None)
    module = obs(
        5, "model", (), device="accel:0", summary="Sequential 161 params accel:0", detail="- d"
    )
    with TraceWriter(db) as writer:
        writer.add_observations(writer.begin_run("check", [], "/project"), [obs(3), module])
    with TraceReader(db) as reader:
        rows = reader.observations_for(SCRIPT)
    assert [(r.line, r.summary, r.detail) for r in rows] == [
        (3, None, None),
        (5, "Sequential 161 params accel:0", "- d"),
    ]
    conn = sqlite3.connect(db)
    version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),) == ("3",)
    conn.close()
