"""Helpers for the language server's end-to-end tests: a workspace with a copied sample script,
a real ``tensor-dap check`` run into its ``.tensor-dap/trace.db``, and an initialized client."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from tests.conftest import SAMPLES, SIMULATE_CUDA

SCRIPT = "masked_scatter_on_cpu.py"

SERVER = ClientServerConfig(
    server_command=[sys.executable, "-m", "tensor_dap", "lsp"],
    server_env={k: v for k, v in os.environ.items() if k != "TENSOR_DAP_TRACE"},
)


def make_workspace(root: Path) -> Path:
    """A workspace folder holding a copy of the sample script; returns the script's path."""
    root.mkdir(parents=True, exist_ok=True)
    script = root / SCRIPT
    shutil.copy(SAMPLES / SCRIPT, script)
    return script


def run_check(script: Path, simulate: bool = True) -> subprocess.CompletedProcess[str]:
    """``tensor-dap check SCRIPT`` in the script's folder, into its ``.tensor-dap/trace.db``;
    with ``simulate``, ``--simulate cuda``, as a user without a GPU checks the sample (CUDA
    code)."""
    root = script.parent
    command = [sys.executable, "-m", "tensor_dap", "check", *(SIMULATE_CUDA if simulate else ())]
    command += ["--trace", str(root / ".tensor-dap" / "trace.db"), str(script)]
    return subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=root)


def vscode_capabilities() -> types.ClientCapabilities:
    """VS Code's capabilities as pytest-lsp recorded them (VS Code 1.65), plus the inlay hint
    capabilities VS Code declares since 1.67 (the record predates the inlay hint API)."""
    capabilities = client_capabilities("visual-studio-code")
    assert capabilities.workspace is not None and capabilities.text_document is not None
    capabilities.workspace.inlay_hint = types.InlayHintWorkspaceClientCapabilities(
        refresh_support=True
    )
    capabilities.text_document.inlay_hint = types.InlayHintClientCapabilities(
        dynamic_registration=True
    )
    return capabilities


async def start(client: LanguageClient, root: Path, options: Any = None) -> list[int]:
    """Initialize ``client`` with VS Code's capabilities on ``root`` (and ``options`` as the
    ``initializationOptions``, as the VS Code extension sends its settings); returns a list
    that grows by one per ``workspace/inlayHint/refresh`` request the server sends."""
    refreshes: list[int] = []

    @client.feature(types.WORKSPACE_INLAY_HINT_REFRESH)
    def refresh(params: None) -> None:
        refreshes.append(1)

    await client.initialize_session(
        types.InitializeParams(
            capabilities=vscode_capabilities(),
            root_uri=root.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
            initialization_options=options,
        )
    )
    return refreshes


def open_document(client: LanguageClient, path: Path, version: int = 1) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=version, text=path.read_text()
            )
        )
    )
    return uri


def replace_text(client: LanguageClient, uri: str, text: str, version: int) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


async def hints(client: LanguageClient, uri: str, first: int = 0, last: int = 10_000) -> list:
    result = await client.text_document_inlay_hint_async(
        types.InlayHintParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(
                start=types.Position(line=first, character=0),
                end=types.Position(line=last, character=0),
            ),
        )
    )
    return [(h.position.line, h.position.character, h.label) for h in result or []]


async def eventually(
    condition: Callable[[], bool], timeout: float = 30.0, message: Callable[[], object] = str
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for the server: {message()}"
        await asyncio.sleep(0.05)


@pytest_lsp.fixture(config=SERVER)
async def client(lsp_client: LanguageClient, script: Path):
    """The server, started on the folder of the test module's ``script`` fixture. The count of
    ``workspace/inlayHint/refresh`` requests it has sent is ``len(client.refreshes)``."""
    lsp_client.refreshes = await start(lsp_client, script.parent)  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()
