"""Static lints as diagnostics and their quick fixes, end to end against the real server, in a
workspace without any run (no trace store): positions, codes and the exact edits."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from .conftest import SERVER, eventually, open_document, replace_text
from .conftest import start as start_client

PITFALLS = textwrap.dedent(
    """\
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = torch.load("model.pt")
    w = torch.randn(4, requires_grad=True)

    total = torch.zeros(1)
    for x, y in batches:
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        total += loss
        w = w - 0.1 * w.grad

    for p in model.parameters():
        p.data.add_(p.grad, alpha=-0.1)
    """
)

IDIOMS = textwrap.dedent(
    """\
    import torch

    device = torch.device("cuda")
    state = torch.load("model.pt", map_location="cpu", weights_only=True)
    w = torch.randn(4, requires_grad=True, device=device)
    total = torch.zeros(1, device=device)
    total_loss = 0.0
    for i, (x, y) in enumerate(batches):
        loss = ((model(x) - y) ** 2).mean()
        (loss / 4).backward()
        if (i + 1) % 4 == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        total += loss.detach()
        total_loss += loss.item()
        with torch.no_grad():
            w -= 0.1 * w.grad
    snapshot = [p.data.clone() for p in model.parameters()]
    """
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "pitfalls.py").write_text(PITFALLS)
    (folder / "idioms.py").write_text(IDIOMS)
    return folder


@pytest_lsp.fixture(config=SERVER)
async def client(lsp_client: LanguageClient, root: Path):
    await start_client(lsp_client, root)
    yield
    await lsp_client.shutdown_session()


def span(line: int, start: int, end: int, end_line: int = -1) -> types.Range:
    return types.Range(
        start=types.Position(line=line, character=start),
        end=types.Position(line=line if end_line < 0 else end_line, character=end),
    )


async def actions(client: LanguageClient, uri: str, line: int) -> list[types.CodeAction]:
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=span(line, 0, 0),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    assert result is not None
    return [a for a in result if isinstance(a, types.CodeAction)]


@pytest.mark.asyncio
async def test_static_lints_are_published(client: LanguageClient, root: Path) -> None:
    uri = open_document(client, root / "pitfalls.py")
    await eventually(lambda: bool(client.diagnostics.get(uri)))
    found = [(d.code, d.range, d.source, d.severity) for d in client.diagnostics[uri]]
    warning, hint = types.DiagnosticSeverity.Warning, types.DiagnosticSeverity.Hint
    info = types.DiagnosticSeverity.Information
    assert found == [
        ("load-without-map-location", span(5, 8, 30), "tensor-dap", hint),
        ("load-without-weights-only", span(5, 8, 30), "tensor-dap", info),
        ("cpu-accumulator", span(8, 8, 22), "tensor-dap", warning),
        ("missing-zero-grad", span(12, 4, 20), "tensor-dap", warning),
        ("loss-accumulated-with-graph", span(13, 13, 17), "tensor-dap", warning),
        ("leaf-rebound", span(14, 4, 24), "tensor-dap", warning),
        ("data-write", span(17, 4, 35), "tensor-dap", hint),
    ]
    messages = {d.code: d.message for d in client.diagnostics[uri]}
    assert messages["cpu-accumulator"].startswith(
        "`total` is created on the CPU by `torch.zeros(1)` and a loop adds tensors to it (line 14)"
    )
    assert "`optimizer.zero_grad()`" in messages["missing-zero-grad"]


@pytest.mark.asyncio
async def test_correct_idioms_get_no_diagnostics(client: LanguageClient, root: Path) -> None:
    uri = open_document(client, root / "idioms.py")
    await eventually(lambda: uri in client.diagnostics)
    assert list(client.diagnostics[uri]) == []


@pytest.mark.asyncio
async def test_quick_fixes_edit_exactly(client: LanguageClient, root: Path) -> None:
    uri = open_document(client, root / "pitfalls.py")
    await eventually(lambda: bool(client.diagnostics.get(uri)))
    expected = {
        5: ('Add `map_location="cpu"`', span(5, 29, 29), ', map_location="cpu"'),
        8: ("Create it on the device: add `device=device`", span(8, 21, 21), ", device=device"),
        12: (
            "Insert `optimizer.zero_grad()` at the start of the loop",
            span(10, 0, 0),
            "    optimizer.zero_grad()\n",
        ),
        17: (
            "Write under `torch.no_grad()` instead of through `.data`",
            span(17, 4, 35),
            "with torch.no_grad():\n        p.add_(p.grad, alpha=-0.1)",
        ),
    }
    for line, (title, where, text) in expected.items():
        found = await actions(client, uri, line)
        # torch.load also gets load-without-weights-only's fix and comment
        [fix, ignore] = [a for a in found if "weights" not in a.title]
        assert ignore.title.startswith("Ignore `") and ignore.title.endswith("` on this line")
        assert fix.title == title
        assert fix.kind == types.CodeActionKind.QuickFix
        assert fix.edit is not None and fix.edit.changes is not None
        assert {k: list(v) for k, v in fix.edit.changes.items()} == {
            uri: [types.TextEdit(range=where, new_text=text)]
        }
        assert [d.code for d in fix.diagnostics or []] == [
            {5: "load-without-map-location", 8: "cpu-accumulator"}.get(
                line, {12: "missing-zero-grad", 17: "data-write"}.get(line)
            )
        ]
    # the leaf rebound has no automatic fix, only the comment; a clean line has nothing
    assert [a.title for a in await actions(client, uri, 14)] == [
        "Ignore `leaf-rebound` on this line"
    ]
    assert await actions(client, uri, 0) == []


@pytest.mark.asyncio
async def test_ignore_comment_is_offered_with_the_fix_and_silences_the_line(
    client: LanguageClient, root: Path
) -> None:
    uri = open_document(client, root / "pitfalls.py")
    await eventually(lambda: bool(client.diagnostics.get(uri)))
    fix, ignore = await actions(client, uri, 17)
    assert fix.is_preferred and not ignore.is_preferred
    assert ignore.edit is not None and ignore.edit.changes is not None
    assert list(ignore.edit.changes[uri]) == [
        types.TextEdit(range=span(17, 35, 35), new_text="  # tensor-dap: ignore[data-write]")
    ]
    # the comment applied: the lint is gone, the others stay
    lines = PITFALLS.splitlines(keepends=True)
    lines[17] = lines[17].rstrip("\n") + "  # tensor-dap: ignore[data-write]\n"
    replace_text(client, uri, "".join(lines), 2)
    await eventually(lambda: "data-write" not in [d.code for d in client.diagnostics[uri]])
    assert len(client.diagnostics[uri]) == 6


NEW_PITFALLS = textwrap.dedent(
    """\
    import torch
    import torch.nn.functional as F

    device = torch.device("cuda")
    w = torch.randn(4, 1, requires_grad=True).to(device)


    def train(model, loader, val_loader, optimizer):
        for epoch in range(3):
            for x, y in loader:
                loss = F.cross_entropy(F.softmax(model(x), dim=1), y)
                loss.backward()
                optimizer.zero_grad()
                optimizer.step()
            model.eval()


    def test(model, loader):
        model.eval()
        for x, y in loader:
            print(model(x).argmax(1))
        print(w.grad)
    """
)


@pytest.mark.asyncio
async def test_new_lints_with_their_severities_and_fixes(
    client: LanguageClient, root: Path
) -> None:
    path = root / "new_pitfalls.py"
    path.write_text(NEW_PITFALLS)
    uri = open_document(client, path)
    await eventually(lambda: bool(client.diagnostics.get(uri)))
    warning = types.DiagnosticSeverity.Warning
    info = types.DiagnosticSeverity.Information
    assert [(d.code, d.range.start.line, d.severity) for d in client.diagnostics[uri]] == [
        ("requires-grad-non-leaf", 4, warning),
        ("softmax-into-cross-entropy", 10, warning),
        ("zero-grad-before-step", 12, warning),
        ("eval-without-train", 14, warning),
        ("eval-without-no-grad", 20, info),
    ]

    async def fix(line: int) -> list[types.TextEdit]:
        found = await actions(client, uri, line)
        assert [a.title.startswith("Ignore `") for a in found] == [False, True]
        assert found[0].edit is not None and found[0].edit.changes is not None
        return list(found[0].edit.changes[uri])

    assert await fix(4) == [
        types.TextEdit(range=span(4, 40, 40), new_text=", device=device"),
        types.TextEdit(range=span(4, 41, 52), new_text=""),
    ]
    assert await fix(10) == [types.TextEdit(range=span(10, 35, 61), new_text="model(x)")]
    assert await fix(12) == [
        types.TextEdit(range=span(12, 0, 0, end_line=13), new_text=""),
        types.TextEdit(range=span(14, 0, 0), new_text="            optimizer.zero_grad()\n"),
    ]
    assert await fix(14) == [
        types.TextEdit(range=span(9, 0, 0), new_text="        model.train()\n")
    ]
    assert await fix(20) == [
        types.TextEdit(
            range=span(19, 0, 33, end_line=20),
            new_text="    with torch.no_grad():\n"
            "        for x, y in loader:\n"
            "            print(model(x).argmax(1))",
        )
    ]
