"""Bad input: an empty, locked or truncated trace store, a document outside the workspace, a huge
document, a document with syntax errors. The server keeps answering, promptly, and says what is
wrong at most once."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from tensor_dap.findings import Finding
from tensor_dap.tracedb import Observation, TraceWriter, text_digest

from .conftest import eventually, hints, make_workspace, open_document
from .conftest import run_check as check_script

EXPECTED = [(15, 22, "(6,) f32 cpu"), (20, 72, "(6,) bool cuda:0"), (21, 53, "(3,) f32 cuda:0")]


@pytest.fixture(scope="module")
def checked_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace store written by a real ``tensor-dap check`` run of the sample script."""
    script = make_workspace(tmp_path_factory.mktemp("checked"))
    done = check_script(script)
    assert done.returncode == 1, done.stderr
    return script.parent / ".tensor-dap" / "trace.db"


def copy_store(checked: Path, store: Path) -> None:
    """``checked`` at ``store``, its paths moved to ``store``'s workspace."""
    shutil.copy(checked, store)
    old, new = str(checked.parent.parent), str(store.parent.parent)
    with sqlite3.connect(store) as conn:
        for table in ("observations", "findings", "sources"):
            conn.execute(f"UPDATE {table} SET path = replace(path, ?, ?)", (old, new))
    conn.close()


@pytest.fixture
def script(tmp_path: Path) -> Path:
    return make_workspace(tmp_path / "ws")


@pytest.fixture
def store(script: Path) -> Path:
    path = script.parent / ".tensor-dap" / "trace.db"
    path.parent.mkdir()
    return path


async def hover(client: LanguageClient, uri: str, line: int = 15, character: int = 4):
    return await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=character),
        )
    )


async def timed(awaitable):
    start = time.monotonic()
    result = await awaitable
    return result, time.monotonic() - start


def warnings(client: LanguageClient) -> list[str]:
    return [
        m.message
        for m in client.log_messages
        if m.type in (types.MessageType.Warning, types.MessageType.Error)
    ]


def assert_said_at_most_once(client: LanguageClient) -> None:
    messages = [m.message for m in client.log_messages]
    assert len(messages) == len(set(messages)), messages


@pytest.mark.asyncio
async def test_empty_store(client: LanguageClient, script: Path, store: Path) -> None:
    store.write_bytes(b"")
    uri = open_document(client, script)
    assert await hints(client, uri) == []
    assert await hover(client, uri) is None
    await eventually(lambda: uri in client.diagnostics)
    await asyncio.sleep(1.5)  # a poll round or two
    assert await hints(client, uri) == []
    assert store.stat().st_size == 0  # read, never written
    assert_said_at_most_once(client)
    assert warnings(client) == []


@pytest.mark.asyncio
async def test_locked_store(
    client: LanguageClient, script: Path, store: Path, checked_store: Path
) -> None:
    copy_store(checked_store, store)
    uri = open_document(client, script)
    assert await hints(client, uri) == EXPECTED

    # a writer in the middle of a transaction (WAL): readers see the last commit
    writer = sqlite3.connect(store, isolation_level=None)
    try:
        writer.execute("BEGIN EXCLUSIVE")
        writer.execute("UPDATE observations SET dtype = 'float64'")
        found, took = await timed(hints(client, uri))
        assert found == EXPECTED and took < 2.0
        answer, took = await timed(hover(client, uri))
        assert answer is not None and took < 2.0
        await asyncio.sleep(1.5)  # the poll runs while the lock is held
        found, took = await timed(hints(client, uri))
        assert found == EXPECTED and took < 2.0
    finally:
        writer.execute("ROLLBACK")
        writer.close()

    assert_said_at_most_once(client)


@pytest.mark.asyncio
async def test_store_locked_out_answers_the_last_read(
    client: LanguageClient, script: Path, store: Path, checked_store: Path
) -> None:
    copy_store(checked_store, store)
    uri = open_document(client, script)
    assert await hints(client, uri) == EXPECTED

    # the store replaced by a file that another process holds exclusively (SQLite's
    # locking_mode EXCLUSIVE): no reader gets in at all. The server answers from its last read,
    # promptly, and says so once.
    locked = store.with_name("replacement.db")
    shutil.copy(store, locked)
    holder = sqlite3.connect(locked, isolation_level=None)
    try:
        holder.execute("PRAGMA locking_mode=EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("UPDATE observations SET dtype = 'float64'")
        os.replace(locked, store)
        await asyncio.sleep(1.5)  # a poll finds the new file and waits for its lock
        found, took = await timed(hints(client, uri))
        assert found == EXPECTED and took < 3.0
        answer, took = await timed(hover(client, uri))
        assert answer is not None and took < 3.0
        await eventually(lambda: any("busy" in w for w in warnings(client)))
        found, took = await timed(hints(client, uri))
        assert found == EXPECTED and took < 3.0
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()
    assert [w for w in warnings(client) if "busy" in w][1:] == []
    # the store answers again: hints from a fresh read
    assert await hints(client, uri) == EXPECTED


@pytest.mark.asyncio
async def test_truncated_store(
    client: LanguageClient, script: Path, store: Path, checked_store: Path
) -> None:
    copy_store(checked_store, store)
    data = store.read_bytes()
    store.write_bytes(data[: len(data) // 2])
    uri = open_document(client, script)
    found = await hints(client, uri)
    assert found in (EXPECTED, [])  # what can still be read, or nothing
    await eventually(lambda: uri in client.diagnostics)
    await asyncio.sleep(1.5)
    assert await hints(client, uri) == found
    await hover(client, uri)
    assert_said_at_most_once(client)


@pytest.mark.asyncio
async def test_document_outside_the_workspace(
    client: LanguageClient, script: Path, store: Path, checked_store: Path, tmp_path: Path
) -> None:
    copy_store(checked_store, store)
    outside = tmp_path / "elsewhere" / script.name
    outside.parent.mkdir()
    shutil.copy(script, outside)
    uri = open_document(client, outside)
    assert uri.startswith("file:///tmp/") or uri.startswith("file:///")
    assert await hints(client, uri) == []
    assert await hover(client, uri) is None
    await eventually(lambda: uri in client.diagnostics)
    assert list(client.diagnostics[uri]) == []
    # the workspace's own file still has its hints
    assert await hints(client, open_document(client, script)) == EXPECTED
    assert warnings(client) == []


@pytest.mark.asyncio
async def test_huge_document_does_not_block(
    client: LanguageClient, script: Path, store: Path, checked_store: Path
) -> None:
    copy_store(checked_store, store)
    small = open_document(client, script)
    assert await hints(client, small) == EXPECTED
    huge = script.parent / "huge.py"
    huge.write_text("".join(f"x{i} = torch.zeros({i % 64 + 1}, 10)\n" for i in range(200_000)))
    uri = open_document(client, huge)
    pending = asyncio.ensure_future(hints(client, uri))
    answer, took = await timed(hover(client, small))
    assert answer is not None and took < 2.0
    assert await asyncio.wait_for(pending, 30) == []
    await eventually(lambda: uri in client.diagnostics)
    assert list(client.diagnostics[uri]) == []
    answer, took = await timed(hover(client, small))
    assert answer is not None and took < 2.0
    assert warnings(client) == []


@pytest.mark.asyncio
async def test_syntax_errors(client: LanguageClient, script: Path, store: Path) -> None:
    # a run of a file that later lines break: the store as a run of it would leave it
    text = (
        "import torch\n"
        "acc = torch.zeros(1)\n"
        "for x in range(3):\n"
        "    acc += torch.ones(1)\n"
        "torch.load('w.pt')\n"
        "y = torch.ones(6)\n"
        "def broken(:\n"
    )
    broken = script.parent / "broken.py"
    broken.write_text(text)
    with TraceWriter(store) as writer:
        run = writer.begin_run("check", [str(broken)], str(script.parent))
        writer.add_observations(
            run, [Observation(str(broken), 6, "y", (6,), "float32", "cpu", False, None, col=17)]
        )
        writer.add_findings(
            run,
            [Finding("device-mismatch", str(broken), 6, "y is on cpu")],
        )
        writer.record_source(str(broken), text_digest(text), run)
        writer.end_run(run, {"status": "ok", "code": 1})
    uri = open_document(client, broken)
    await eventually(lambda: bool(client.diagnostics.get(uri)))
    assert [(d.code, d.range.start.line) for d in client.diagnostics[uri]] == [
        ("device-mismatch", 5)
    ]
    assert await hints(client, uri) == [(5, 17, "(6,) f32 cpu")]
    answer = await hover(client, uri, 5, 0)
    assert answer is not None and "(6,)" in str(answer.contents)
    assert warnings(client) == []
