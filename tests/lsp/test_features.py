"""Inlay hints, hovers and diagnostics against the real server after a real ``tensor-dap check``
run of ``sample_project/masked_scatter_on_cpu.py`` (copied into a temporary workspace)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from .conftest import eventually, hints, make_workspace, open_document, replace_text
from .conftest import run_check as check_script


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = make_workspace(tmp_path_factory.mktemp("ws"))
    done = check_script(path)
    assert done.returncode == 1, done.stderr  # the script fails with the device mismatch
    return path


@pytest.mark.asyncio
async def test_inlay_hints_at_statement_ends(client: LanguageClient, script: Path) -> None:
    uri = open_document(client, script)
    assert await hints(client, uri) == [
        (15, 22, "(6,) f32 cpu"),  # `    y = torch.zeros(6)`
        (20, 72, "(6,) bool cuda:0"),  # `mask = torch.tensor([...], dtype=torch.bool, ...)`
        (21, 53, "(3,) f32 cuda:0"),  # `source = torch.tensor([1.0, 2.0, 3.0], device=device)`
    ]
    # only the requested range
    assert await hints(client, uri, 16, 20) == [(20, 72, "(6,) bool cuda:0")]
    assert await hints(client, uri, 0, 14) == []


async def hover_at(client: LanguageClient, uri: str, line: int, character: int):
    return await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=character),
        )
    )


@pytest.mark.asyncio
async def test_hover_on_observed_name(client: LanguageClient, script: Path) -> None:
    uri = open_document(client, script)
    result = await hover_at(client, uri, 15, 4)
    assert result is not None
    assert isinstance(result.contents, types.MarkupContent)
    assert result.contents.kind == types.MarkupKind.Markdown
    assert result.contents.value == "**y**: `(6,)` float32 on `cpu`, no grad\n\n- ran once"
    # a word with no observation on its line, and a line without observations
    for line, character in ((15, 10), (16, 4)):
        assert await hover_at(client, uri, line, character) is None


@pytest.mark.asyncio
async def test_hover_says_the_device_was_simulated(client: LanguageClient, script: Path) -> None:
    # the run was `tensor-dap check --simulate cuda`: cuda:0 was the CPU
    uri = open_document(client, script)
    result = await hover_at(client, uri, 20, 1)
    assert result is not None and isinstance(result.contents, types.MarkupContent)
    assert result.contents.value == (
        "**mask**: `(6,)` bool on `cuda:0` (simulated on the CPU), no grad\n\n- ran once"
    )


@pytest.mark.asyncio
async def test_findings_become_diagnostics(client: LanguageClient, script: Path) -> None:
    uri = open_document(client, script)
    await eventually(lambda: bool(client.diagnostics.get(uri)))
    [diagnostic] = client.diagnostics[uri]
    assert diagnostic.code == "device-mismatch"
    assert diagnostic.source == "tensor-dap"
    assert diagnostic.severity == types.DiagnosticSeverity.Warning
    # `    y.masked_scatter_(mask, x)  # expect: device-mismatch`, without the indentation
    assert diagnostic.range == types.Range(
        start=types.Position(line=16, character=4), end=types.Position(line=16, character=57)
    )
    assert diagnostic.message.startswith("`y.masked_scatter_(mask, x)`: y is on cpu")
    related = diagnostic.related_information or []
    assert [(r.location.uri, r.location.range.start.line, r.message) for r in related] == [
        (uri, 15, "y created here by zeros"),
        (uri, 20, "mask created here by tensor"),
        (uri, 21, "x created here by tensor"),
    ]


@pytest.mark.asyncio
async def test_device_fix_for_the_runtime_finding(client: LanguageClient, script: Path) -> None:
    uri = open_document(client, script)
    await eventually(lambda: bool(client.diagnostics.get(uri)))
    # asked on the finding's line and on the CPU tensor's origin line: the same fix
    for line in (16, 15):
        result = await client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=types.Range(
                    start=types.Position(line=line, character=0),
                    end=types.Position(line=line, character=0),
                ),
                context=types.CodeActionContext(diagnostics=list(client.diagnostics[uri])),
            )
        )
        [fix] = result or []
        assert isinstance(fix, types.CodeAction)
        assert fix.title == "Create y on the device: add `device=device`"
        assert fix.kind == types.CodeActionKind.QuickFix
        assert [d.code for d in fix.diagnostics or []] == ["device-mismatch"]
        # `    y = torch.zeros(6)` -> `    y = torch.zeros(6, device=device)`
        where = types.Range(
            start=types.Position(line=15, character=21), end=types.Position(line=15, character=21)
        )
        assert fix.edit is not None and fix.edit.changes is not None
        assert {k: list(v) for k, v in fix.edit.changes.items()} == {
            uri: [types.TextEdit(range=where, new_text=", device=device")]
        }


@pytest.mark.asyncio
async def test_inline_values(client: LanguageClient, script: Path) -> None:
    uri = open_document(client, script)

    async def values(first: int, last: int) -> list[tuple[int, int, int, str]]:
        result = await client.text_document_inline_value_async(
            types.InlineValueParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=types.Range(
                    start=types.Position(line=first, character=0),
                    end=types.Position(line=last, character=0),
                ),
                context=types.InlineValueContext(
                    frame_id=1,
                    stopped_location=types.Range(
                        start=types.Position(line=16, character=0),
                        end=types.Position(line=16, character=0),
                    ),
                ),
            )
        )
        found = []
        for value in result or []:
            assert isinstance(value, types.InlineValueText)
            where = value.range
            assert where.start.line == where.end.line
            found.append((where.start.line, where.start.character, where.end.character, value.text))
        return found

    assert await values(0, 30) == [
        (15, 4, 22, "y: (6,) f32 cpu"),
        (20, 0, 72, "mask: (6,) bool cuda:0"),
        (21, 0, 53, "source: (3,) f32 cuda:0"),
    ]
    assert await values(14, 17) == [(15, 4, 22, "y: (6,) f32 cpu")]
    assert await values(0, 14) == []


async def hover_text(client: LanguageClient, uri: str, line: int, character: int) -> str:
    result = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=character),
        )
    )
    return "" if result is None else str(result.contents)


@pytest.mark.asyncio
async def test_hints_follow_the_code_and_leave_edited_lines(
    client: LanguageClient, script: Path
) -> None:
    uri = open_document(client, script)
    original = await hints(client, uri)
    assert len(original) == 3
    # a line inserted above: every hint and hover moves one line down
    replace_text(client, uri, "import os\n" + script.read_text(), version=2)
    assert await hints(client, uri) == [(line + 1, col, text) for line, col, text in original]
    assert "(6,)" in await hover_text(client, uri, 16, 4)
    assert await hover_text(client, uri, 15, 4) == ""
    # the assignment itself edited: its hint and hover go, the others stay
    edited = script.read_text().replace("y = torch.zeros(6)", "y = torch.zeros(7)")
    replace_text(client, uri, edited, version=3)
    assert [h for h in await hints(client, uri) if h[0] == 15] == []
    assert len(await hints(client, uri)) == 2
    assert await hover_text(client, uri, 15, 4) == ""
    # back to the text the run saw: the hints return
    replace_text(client, uri, script.read_text(), version=4)
    assert await hints(client, uri) == original
