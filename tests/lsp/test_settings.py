"""The editor's hint settings (``initializationOptions.hints``, what the VS Code extension sends
from ``tensorDap.hints.*``) change what the real server answers after a real run."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from .conftest import SERVER, hints, make_workspace, open_document
from .conftest import run_check as check_script
from .conftest import start as start_client


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = make_workspace(tmp_path_factory.mktemp("ws"))
    assert check_script(path).returncode == 1
    return path


@pytest_lsp.fixture(config=SERVER)
async def client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


@pytest.mark.asyncio
async def test_shape_style_shows_shapes_only(client: LanguageClient, script: Path) -> None:
    await start_client(client, script.parent, {"hints": {"enabled": True, "style": "shape"}})
    uri = open_document(client, script)
    assert await hints(client, uri) == [(15, 22, "(6,)"), (20, 72, "(6,)"), (21, 53, "(3,)")]


@pytest.mark.asyncio
async def test_hints_switched_off(client: LanguageClient, script: Path) -> None:
    await start_client(client, script.parent, {"hints": {"enabled": False}})
    uri = open_document(client, script)
    assert await hints(client, uri) == []


@pytest.mark.asyncio
async def test_malformed_settings_keep_the_defaults(client: LanguageClient, script: Path) -> None:
    await start_client(client, script.parent, {"hints": {"enabled": "yes", "style": "huge"}})
    uri = open_document(client, script)
    assert (15, 22, "(6,) f32 cpu") in await hints(client, uri)
