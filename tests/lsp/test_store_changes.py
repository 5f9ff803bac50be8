"""The server follows the trace store: no store yet, a first run, a second run of changed code
(hints and diagnostics refresh without reopening the file), and a corrupt store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from .conftest import eventually, hints, make_workspace, open_document, replace_text
from .conftest import run_check as check_script


@pytest.fixture
def script(tmp_path: Path) -> Path:
    return make_workspace(tmp_path / "ws")


def store_messages(client: LanguageClient) -> list[types.LogMessageParams]:
    return [m for m in client.log_messages if "trace store" in m.message]


@pytest.mark.asyncio
async def test_runs_refresh_hints_and_diagnostics(client: LanguageClient, script: Path) -> None:
    refreshes: list[int] = client.refreshes  # type: ignore[attr-defined]
    uri = open_document(client, script)
    # no run yet: nothing shown, said once
    assert await hints(client, uri) == []
    assert await hints(client, uri) == []
    await eventually(lambda: uri in client.diagnostics)
    assert list(client.diagnostics[uri]) == []
    [message] = store_messages(client)
    assert message.type == types.MessageType.Info
    assert "no trace store" in message.message

    before = len(refreshes)
    done = await asyncio.to_thread(check_script, script)
    assert done.returncode == 1, done.stderr
    await eventually(
        lambda: len(refreshes) > before and bool(client.diagnostics.get(uri)),
        message=lambda: (refreshes, before, client.diagnostics),
    )
    assert [d.code for d in client.diagnostics[uri]] == ["device-mismatch"]
    assert (15, 22, "(6,) f32 cpu") in await hints(client, uri)

    before_edit = await hints(client, uri)
    mask_hint = next(h for h in before_edit if h[0] == 20)  # `mask = torch.tensor(...)`
    # fix the bug, one line lower: the edited line loses its hint and its finding, the lines
    # below keep theirs, one line further down
    fixed = script.read_text().replace(
        "    y = torch.zeros(6)\n", "    # fixed\n    y = torch.zeros(6, device=mask.device)\n"
    )
    script.write_text(fixed)
    replace_text(client, uri, fixed, version=2)
    after_edit = await hints(client, uri)
    assert not [h for h in after_edit if h[0] in (15, 16)], after_edit
    assert (21, mask_hint[1], mask_hint[2]) in after_edit
    assert len(after_edit) == len(before_edit) - 1
    # the finding was on the line below the edit: it moves with it
    await eventually(
        lambda: (
            [(d.code, d.range.start.line) for d in client.diagnostics.get(uri, [])]
            == [("device-mismatch", 17)]
        ),
        message=lambda: client.diagnostics.get(uri),
    )
    # an edit that touches no observed line keeps every hint where it is
    spaced = fixed.replace("import torch\n", "import torch  # the only import we need\n")
    replace_text(client, uri, spaced, version=3)
    assert (21, mask_hint[1], mask_hint[2]) in await hints(client, uri)
    replace_text(client, uri, fixed, version=4)

    before = len(refreshes)
    done = await asyncio.to_thread(check_script, script)
    assert done.returncode == 0, done.stderr
    await eventually(
        lambda: len(refreshes) > before and list(client.diagnostics.get(uri, [1])) == []
    )
    assert await hints(client, uri, 16, 16) == [(16, 42, "(6,) f32 cuda:0")]


@pytest.mark.asyncio
async def test_corrupt_store_keeps_serving(client: LanguageClient, script: Path) -> None:
    store = script.parent / ".tensor-dap" / "trace.db"
    store.parent.mkdir()
    store.write_bytes(b"this is not an sqlite database, just garbage " * 200)
    uri = open_document(client, script)
    assert await hints(client, uri) == []
    await asyncio.sleep(1.5)  # a poll round or two
    assert await hints(client, uri) == []
    result = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=15, character=4),
        )
    )
    assert result is None
    # said once (an Info "no trace store yet" may come first, from a poll before the write)
    [message] = [m for m in store_messages(client) if m.type == types.MessageType.Warning]
    assert str(store) in message.message


@pytest.mark.asyncio
async def test_a_paused_debug_session_shows_the_lines_that_ran(
    client: LanguageClient, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F5 with no earlier ``check``: paused at a breakpoint, the lines that ran get their hints
    (the session writes the store as it runs; the server refreshes when it changes)."""
    from tests.dap.client import DapClient

    monkeypatch.delenv("TENSOR_DAP_TRACE", raising=False)  # the workspace's store
    refreshes: list[int] = client.refreshes  # type: ignore[attr-defined]
    uri = open_document(client, script)
    assert await hints(client, uri) == []
    before = len(refreshes)
    dap = DapClient()
    try:
        await asyncio.to_thread(
            dap.start, str(script), [], {str(script): [23]}, cwd=str(script.parent)
        )
        stopped = await asyncio.to_thread(dap.event, "stopped")
        assert stopped["body"]["reason"] == "breakpoint"
        await eventually(lambda: len(refreshes) > before, message=lambda: refreshes)

        async def shown() -> dict[int, str]:
            return {line: label for line, _col, label in await hints(client, uri)}

        deadline = asyncio.get_running_loop().time() + 30
        while not {20, 21} <= set(await shown()):
            assert asyncio.get_running_loop().time() < deadline, await shown()
            await asyncio.sleep(0.2)
        labels = await shown()
        assert labels[20].startswith("(6,) bool") and labels[21].startswith("(3,) f32")
        assert 15 not in labels  # myfunc has not run yet
        dap.send("continue", {"threadId": stopped["body"]["threadId"]})
        await asyncio.to_thread(dap.event, "terminated")
    finally:
        await asyncio.to_thread(dap.close)
