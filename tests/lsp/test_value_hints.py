"""Hints and hovers describe what each assigned name holds after its line — a module, a list,
dict or tuple of tensors, each name of an unpacking, a tensor a helper made — not the last
tensor an op produced on the line; after a real ``tensor-dap check`` run, against the real
server."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from .conftest import hints, open_document, run_check

SCRIPT = textwrap.dedent(
    """\
    import torch
    from torch import nn

    from tensor_dap.testing import accelerator_device

    device = accelerator_device()


    def to_device(t):
        return t.float().to(device)


    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to(device)
    shapes = [(16, 8), (16, 1), (16, 8), (16, 1)]
    weights = [to_device(torch.ones(s)) for s in shapes]
    named = {"w": torch.zeros(3, 4, device=device), "b": torch.zeros(4, device=device)}
    batch = (torch.randn(5, 8, device=device), torch.randn(5, 1, device=device))
    x, y = batch
    h = to_device(torch.arange(6).reshape(2, 3))
    print(model(x).shape, h.device)
    """
)


def line_of(text: str) -> int:
    """The 0-based line of the script that starts with ``text``."""
    return next(i for i, line in enumerate(SCRIPT.splitlines()) if line.startswith(text))


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ws") / "values.py"
    path.write_text(SCRIPT)
    done = run_check(path, simulate=False)
    assert done.returncode == 0, done.stderr
    return path


async def hover_text(client: LanguageClient, uri: str, text: str, word: str) -> str:
    line = line_of(text)
    character = SCRIPT.splitlines()[line].index(word)
    result = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=character),
        )
    )
    assert result is not None and isinstance(result.contents, types.MarkupContent)
    return result.contents.value


def on_line(found: list[tuple[int, int, str]], text: str) -> list[str]:
    return [label for line, _, label in found if line == line_of(text)]


@pytest.mark.asyncio
async def test_module_hint_counts_parameters_on_their_device(
    client: LanguageClient, script: Path
) -> None:
    uri = open_document(client, script)
    found = await hints(client, uri)
    # not `(1,) f32 accel:0`, the last bias `.to(device)` moved
    assert on_line(found, "model = ") == ["Sequential 161 params accel:0"]
    assert await hover_text(client, uri, "model = ", "model") == (
        "**model**: Sequential 161 params accel:0\n\n"
        "- 161 parameters in 4 tensors, 161 trainable\n"
        "- dtype: float32; device: accel:0\n"
        "- ran once"
    )


@pytest.mark.asyncio
async def test_list_of_tensors_moved_by_a_helper(client: LanguageClient, script: Path) -> None:
    uri = open_document(client, script)
    found = await hints(client, uri)
    # not `(16, 1) f32 cpu`, the CPU tensor the comprehension made before the helper moved it
    assert on_line(found, "weights = ") == ["list[4] of ((16, 8), (16, 1)) accel:0"]
    hover = await hover_text(client, uri, "weights = ", "weights")
    assert hover.startswith("**weights**: list[4] of ((16, 8), (16, 1)) accel:0\n\n")
    assert "- [0]: `(16, 8)` float32 on `accel:0`\n- [1]: `(16, 1)` float32 on `accel:0`" in hover


@pytest.mark.asyncio
async def test_dict_and_tuple_of_tensors(client: LanguageClient, script: Path) -> None:
    uri = open_document(client, script)
    found = await hints(client, uri)
    assert on_line(found, "named = ") == ["dict[2] of ((3, 4), (4,)) accel:0"]
    assert on_line(found, "batch = ") == ["tuple[2] of ((5, 8), (5, 1)) accel:0"]
    hover = await hover_text(client, uri, "named = ", "named")
    assert "- ['w']: `(3, 4)` float32 on `accel:0`\n- ['b']: `(4,)` float32 on `accel:0`" in hover


@pytest.mark.asyncio
async def test_tuple_unpacking_annotates_each_name(client: LanguageClient, script: Path) -> None:
    uri = open_document(client, script)
    found = await hints(client, uri)
    # a line without any op of its own: read after it ran
    assert on_line(found, "x, y = batch") == ["x: (5, 8) f32 accel:0", "y: (5, 1) f32 accel:0"]
    assert (await hover_text(client, uri, "x, y = batch", "y")).startswith(
        "**y**: `(5, 1)` float32 on `accel:0`"
    )


@pytest.mark.asyncio
async def test_tensor_made_by_a_helper_is_what_the_name_holds(
    client: LanguageClient, script: Path
) -> None:
    uri = open_document(client, script)
    found = await hints(client, uri)
    # not `(2, 3) i64 cpu`, the argument the line built before the helper converted it
    assert on_line(found, "h = ") == ["(2, 3) f32 accel:0"]
    # the helper's own line: the value it returns (the last call's)
    assert on_line(found, "    return t.float()") == ["return: (2, 3) f32 accel:0"]
    # every hint in the file is one of the above: nothing for `print(...)` or `shapes = ...`
    assert len(found) == 8
