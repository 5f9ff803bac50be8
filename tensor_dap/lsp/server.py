"""The ``tensor-dap`` language server (pygls 2.x) and its lifecycle: ``initialized``,
``textDocument/didOpen|didChange|didSave|didClose`` and the trace store poll. The features live
in one module each: inlay hints, hover, diagnostics (with the static lints), code actions and
inline values.

``tensor-dap lsp`` runs :func:`main` on stdio. The store is
``<workspace root>/.tensor-dap/trace.db`` (the root from ``initialize``'s rootUri, else its first
workspace folder); ``$TENSOR_DAP_TRACE`` overrides it (relative to the root). Every second the
server polls the store's ``data_version()``; when it changed, it re-publishes the diagnostics of
the open documents and asks the client to refresh inlay hints (``workspace/inlayHint/refresh``,
when the client supports it). Store reads run in a worker thread so a locked store never blocks
the editor; what is wrong with the store is logged once through ``window/logMessage``.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Optional

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from tensor_dap import __version__
from tensor_dap.tracedb import TRACE_ENV, default_trace_path, text_digest

from . import alignment
from . import code_actions as code_actions_feature
from . import diagnostics as diagnostics_feature
from . import hover as hover_feature
from . import inlay_hints as inlay_hints_feature
from . import inline_values as inline_values_feature
from . import lints as static_lints
from .lints import Lint
from .store import EMPTY, FileData, TraceStore

POLL_S = 1.0
"""How often the trace store's ``data_version()`` is checked."""

STORE_WAIT_S = 0.5
"""How long a request waits for the trace store (locked by another process, say) before it is
answered from the last data read for the file (else empty)."""


class RawJson:
    """A result already serialized as JSON text; sent as is, without pygls's converter (which
    costs tens of milliseconds for ten thousand inlay hints)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class TensorDapProtocol(LanguageServerProtocol):
    """pygls's protocol, sending :class:`RawJson` results without converting them again."""

    def _send_response(self, msg_id: Any, result: Any = None, error: Any = None) -> None:
        if error is not None or not isinstance(result, RawJson) or self.writer is None:
            super()._send_response(msg_id, result, error)
            return
        self._result_types.pop(msg_id, None)
        body = f'{{"jsonrpc":"2.0","id":{json.dumps(msg_id)},"result":{result.text}}}'.encode()
        header = b""
        if self._include_headers:
            header = (
                f"Content-Length: {len(body)}\r\n"
                f"Content-Type: {self.CONTENT_TYPE}; charset={self.CHARSET}\r\n\r\n"
            ).encode()
        written = self.writer.write(header + body)
        if inspect.isawaitable(written):
            asyncio.ensure_future(written)


class TensorDapServer(LanguageServer):
    """The language server, holding the trace store and the open documents' digests."""

    def __init__(self) -> None:
        super().__init__("tensor-dap", __version__, protocol_cls=TensorDapProtocol)
        self.store = TraceStore()
        self._digests: dict[str, tuple[Optional[int], str]] = {}
        self._lints: dict[str, tuple[Optional[int], list[Lint]]] = {}
        self._trees: dict[str, tuple[Optional[int], Optional[ast.Module]]] = {}
        self._reads: dict[str, asyncio.Future[FileData]] = {}
        self._last: dict[str, FileData] = {}
        self._slow_store = False
        self._lint_pool: Optional[ProcessPoolExecutor] = None
        self._lint_pool_failed = False
        self._poller: Optional[asyncio.Task[None]] = None
        self.hints_enabled = True
        self.hint_style = "full"

    def configure(self, options: Any) -> None:
        """Take the editor's settings from ``initializationOptions``: ``{"hints": {"enabled":
        bool, "style": "full" | "shape"}}`` (what the VS Code extension sends; it restarts the
        server when they change). Anything missing or malformed keeps the default."""
        hints = options.get("hints") if isinstance(options, dict) else None
        if not isinstance(hints, dict):
            return
        if isinstance(hints.get("enabled"), bool):
            self.hints_enabled = hints["enabled"]
        if hints.get("style") in inlay_hints_feature.STYLES:
            self.hint_style = hints["style"]

    # -- the store ----------------------------------------------------------------------------

    def configure_store(self) -> None:
        """Point the store at the workspace's trace file (or ``$TENSOR_DAP_TRACE``)."""
        root = self.workspace.root_path
        if root is None:
            for folder in self.workspace.folders.values():
                root = to_fs_path(folder.uri)
                if root:
                    break
        path: Optional[Path] = None
        if root or os.environ.get(TRACE_ENV, "").strip():
            path = default_trace_path(root or os.getcwd())
        self.store.set_path(path)

    async def file_data(self, document: TextDocument) -> FileData:
        """What the store holds about ``document``'s file, on the document's line numbers (see
        :mod:`tensor_dap.lsp.alignment`; matched in a worker thread when the text changed)."""
        data = await self.stored_data(document)
        digest = self.digest(document)
        ready = alignment.already_aligned(data, digest)
        if ready is not None:
            return ready
        return await asyncio.to_thread(alignment.aligned, data, document.lines, digest)

    async def stored_data(self, document: TextDocument) -> FileData:
        """What the store holds about ``document``'s file (empty for non-file documents).

        Read in a worker thread, one read per file at a time; when the store does not answer
        within :data:`STORE_WAIT_S` (another process holds a lock), the last data read for the
        file answers, else nothing, and the read goes on in the background.
        """
        path = document.path if document.uri.startswith("file:") else None
        if not path:
            return EMPTY
        key = os.path.abspath(path)
        read = self._reads.get(key)
        if read is None or read.done():
            read = self._reads[key] = asyncio.ensure_future(asyncio.to_thread(self.store.file, key))
        try:
            data = await asyncio.wait_for(asyncio.shield(read), STORE_WAIT_S)
        except asyncio.TimeoutError:
            if not self._slow_store:
                self._slow_store = True
                self.window_log_message(
                    types.LogMessageParams(
                        type=types.MessageType.Warning,
                        message=f"tensor-dap: the trace store {self.store.path} is busy (locked "
                        "by another process?); showing what was read before until it answers",
                    )
                )
            return self._last.get(key, EMPTY)
        self._slow_store = False
        if document.uri in self.workspace.text_documents:
            self._last[key] = data
        self.flush_messages()
        return data

    def digest(self, document: TextDocument) -> str:
        """The text digest of ``document``, cached per document version."""
        cached = self._digests.get(document.uri)
        if cached is not None and cached[0] == document.version and document.version is not None:
            return cached[1]
        value = text_digest(document.source)
        self._digests[document.uri] = (document.version, value)
        return value

    async def lints(self, document: TextDocument) -> list[Lint]:
        """The document's static lints, cached per document version; computed in a worker
        process (parsing a 5,000-line file takes a few hundred ms, which in a thread would hold
        the GIL the requests need)."""
        cached = self._lints.get(document.uri)
        if cached is not None and cached[0] == document.version and document.version is not None:
            return cached[1]
        source = document.source
        found: list[Lint] = []
        if len(source) <= static_lints.MAX_SOURCE:
            found = await self._run_lints(source)
        self._lints[document.uri] = (document.version, found)
        return found

    async def _run_lints(self, source: str) -> list[Lint]:
        if not self._lint_pool_failed:
            try:
                if self._lint_pool is None:
                    context = multiprocessing.get_context("spawn")
                    self._lint_pool = ProcessPoolExecutor(1, mp_context=context)
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(self._lint_pool, static_lints.lint, source)
            except (BrokenProcessPool, OSError, RuntimeError) as error:
                self._lint_pool_failed = True
                self.stop_lint_pool()
                self.window_log_message(
                    types.LogMessageParams(
                        type=types.MessageType.Warning,
                        message=f"tensor-dap: cannot lint in a worker process ({error}); "
                        "linting in the server from now on",
                    )
                )
        return await asyncio.to_thread(static_lints.lint, source)

    def stop_lint_pool(self) -> None:
        pool, self._lint_pool = self._lint_pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    async def tree(self, document: TextDocument) -> Optional[ast.Module]:
        """The document's syntax tree (None when it does not parse), cached per version; parsed
        only when a code action needs it."""
        cached = self._trees.get(document.uri)
        if cached is not None and cached[0] == document.version and document.version is not None:
            return cached[1]
        tree = await asyncio.to_thread(static_lints.parse, document.source)
        self._trees[document.uri] = (document.version, tree)
        return tree

    def forget(self, uri: str) -> None:
        """Drop what is kept for a closed document."""
        self._digests.pop(uri, None)
        self._lints.pop(uri, None)
        self._trees.pop(uri, None)
        path = to_fs_path(uri) if uri.startswith("file:") else None
        if path:
            self._last.pop(os.path.abspath(path), None)

    def flush_messages(self) -> None:
        for kind, text in self.store.take_messages():
            self.window_log_message(types.LogMessageParams(type=kind, message=text))

    # -- diagnostics and the poll -------------------------------------------------------------

    async def publish(self, uri: str) -> None:
        document = self.workspace.get_text_document(uri)
        data, lints = await asyncio.gather(self.file_data(document), self.lints(document))
        found = diagnostics_feature.diagnostics(data, document.lines, lints)
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=found, version=document.version)
        )

    def start_polling(self) -> None:
        if self._poller is None:
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            try:
                changed = await asyncio.to_thread(self.store.poll)
                self.flush_messages()
                if changed:
                    await self.store_changed()
            except Exception as error:  # the poll must outlive any one bad round
                self.window_log_message(
                    types.LogMessageParams(
                        type=types.MessageType.Error, message=f"tensor-dap: poll failed: {error}"
                    )
                )
            await asyncio.sleep(POLL_S)

    async def store_changed(self) -> None:
        for uri in list(self.workspace.text_documents):
            await self.publish(uri)
        if self._supports_inlay_refresh():
            future = self.protocol.send_request(types.WORKSPACE_INLAY_HINT_REFRESH, None)
            future.add_done_callback(_ignore_result)

    def _supports_inlay_refresh(self) -> bool:
        workspace = self.client_capabilities.workspace
        inlay = workspace.inlay_hint if workspace is not None else None
        return bool(inlay is not None and inlay.refresh_support)


def _ignore_result(future: Any) -> None:
    if not future.cancelled():
        future.exception()  # retrieved, so that asyncio does not warn about it


def create_server() -> TensorDapServer:
    """A server with every feature registered."""
    server = TensorDapServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: TensorDapServer, params: types.InitializeParams) -> None:
        ls.configure(params.initialization_options)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: TensorDapServer, params: types.InitializedParams) -> None:
        ls.configure_store()
        ls.start_polling()

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: TensorDapServer, params: None) -> None:
        ls.stop_lint_pool()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    async def did_open(ls: TensorDapServer, params: types.DidOpenTextDocumentParams) -> None:
        await ls.publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    async def did_change(ls: TensorDapServer, params: types.DidChangeTextDocumentParams) -> None:
        await ls.publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    async def did_save(ls: TensorDapServer, params: types.DidSaveTextDocumentParams) -> None:
        await ls.publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: TensorDapServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.forget(params.text_document.uri)
        ls.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[])
        )

    @server.feature(types.TEXT_DOCUMENT_INLAY_HINT, types.InlayHintOptions(resolve_provider=False))
    async def inlay_hint(ls: TensorDapServer, params: types.InlayHintParams) -> RawJson:
        if not ls.hints_enabled:
            return RawJson("[]")
        document = ls.workspace.get_text_document(params.text_document.uri)
        data = await ls.file_data(document)
        return RawJson(
            inlay_hints_feature.inlay_hints_json(
                data, document.lines, ls.digest(document), params.range, ls.hint_style
            )
        )

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def hover(ls: TensorDapServer, params: types.HoverParams) -> Optional[types.Hover]:
        document = ls.workspace.get_text_document(params.text_document.uri)
        data = await ls.file_data(document)
        word = document.word_at_position(params.position)
        return hover_feature.hover(data, ls.digest(document), params.position, word)

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]),
    )
    async def code_action(
        ls: TensorDapServer, params: types.CodeActionParams
    ) -> list[types.CodeAction]:
        document = ls.workspace.get_text_document(params.text_document.uri)
        data, lints = await asyncio.gather(ls.file_data(document), ls.lints(document))
        path = document.path if document.uri.startswith("file:") else None
        stale = inlay_hints_feature.is_stale(data, ls.digest(document))
        needs_tree = not stale and any(
            code_actions_feature.fixes_device_at_origin(f) for f in data.findings
        )
        tree = await ls.tree(document) if needs_tree else None
        return code_actions_feature.code_actions(
            document.uri,
            os.path.abspath(path) if path else None,
            document.lines,
            tree,
            lints,
            data,
            stale,
            params.range,
            diagnostics_feature.diagnostics(data, document.lines),
        )

    @server.feature(types.TEXT_DOCUMENT_INLINE_VALUE, types.InlineValueOptions())
    async def inline_value(
        ls: TensorDapServer, params: types.InlineValueParams
    ) -> list[types.InlineValueText]:
        document = ls.workspace.get_text_document(params.text_document.uri)
        data = await ls.file_data(document)
        return inline_values_feature.inline_values(
            data, document.lines, ls.digest(document), params.range
        )

    return server


def main() -> int:
    """Serve LSP on stdin/stdout until the client says exit."""
    create_server().start_io()
    return 0
