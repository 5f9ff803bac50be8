"""The DAP proxy: the editor (client) on one side, debugpy's adapter (server) on the other.

Every message passes through; a handler registered under its name may change it on the way:
``<command>_request`` for client requests, ``<command>_response`` and ``<event>_event`` for
what the server sends. A request handler that must answer the request itself raises
:class:`Refusal`; the proxy sends the failure response, in one place, as debugpy's own adapter
does. Messages to the client are renumbered (``seq``) because the proxy sends some of its own;
requests keep the client's numbers so responses match without bookkeeping.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import subprocess
import sys
import threading
from typing import Any, BinaryIO, Callable, Optional

from tensor_dap.adapter.messaging import MalformedMessage, Writer, read_message

log = logging.getLogger("tensor_dap.adapter")

Message = dict[str, Any]
Handler = Callable[[Message], None]


class Refusal(Exception):
    """Raised by a request handler: the request fails with this message, debugpy never sees it."""


class Answer(Exception):
    """Raised by a request handler that answers the request itself (debugpy does not know
    it): the request succeeds with this body, debugpy never sees it."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__("answered by tensor-dap")
        self.body = body


class Proxy:
    def __init__(self, client_in: BinaryIO, client_out: BinaryIO, python: str = sys.executable):
        self.client_in = client_in
        self.client = Writer(client_out)
        self.python = python
        #: ``"launch_request"``, ``"stopped_event"``... -> what to do with such a message
        self.handlers: dict[str, Handler] = {}
        self._seq = itertools.count(1)
        self._seq_lock = threading.Lock()
        #: our seq of a reverse request sent to the client -> debugpy's seq for it
        self._reverse: dict[int, int] = {}
        self._terminated = False
        self.server_process = subprocess.Popen(
            [python, "-m", "debugpy.adapter"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        self.server = Writer(self.server_process.stdin)  # type: ignore[arg-type]
        #: attach to ``tensor-dap run``: the socket of the adapter ``debugpy.listen`` started
        self.remote: Optional[socket.socket] = None
        #: the client's ``initialize``, replayed to a remote adapter
        self.initialize: Optional[Message] = None
        self._swallow: set[int] = set()
        self._reader: Optional[threading.Thread] = None

    # -- pumps -----------------------------------------------------------------------------
    def run(self) -> int:
        """Serve until the client goes; the exit status of ``tensor-dap adapter``."""
        self._reader = self._start_reader(self.server_process.stdout, self.server_process)  # type: ignore[arg-type]
        self._pump_client()
        self._shutdown()
        self._join_reader()
        return 0

    def _join_reader(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=5)

    def _start_reader(self, stream: BinaryIO, source: object) -> threading.Thread:
        name = "tensor-dap-remote" if source is self.remote else "tensor-dap-server"
        reader = threading.Thread(
            target=self._pump_server, args=(stream, source), name=name, daemon=True
        )
        reader.start()
        return reader

    def _server_gone(self) -> bool:
        if self.remote is not None:
            return self.server.closed
        return self.server_process.poll() is not None

    def _pump_client(self) -> None:
        while True:
            try:
                message = read_message(self.client_in)
            except MalformedMessage as error:
                self.tell_client(f"tensor-dap: ignored a {error}")
                continue
            except (OSError, ValueError):
                return
            if message is None:
                return
            if self._server_gone():
                self._refuse(message, "the debug session has ended")
                continue
            try:
                self._from_client(message)
            except Refusal as refusal:
                self._refuse(message, str(refusal))
            except Answer as answer:
                self._answer(message, answer.body)
            except Exception as error:  # a bug here must not end the session
                log.exception("tensor-dap: handling %s failed", message.get("command"))
                self._refuse(message, f"tensor-dap: {error}")

    def _pump_server(self, stream: BinaryIO, source: object) -> None:
        while True:
            try:
                message = read_message(stream)
            except MalformedMessage:
                continue
            except (OSError, ValueError):
                break
            if message is None:
                break
            if source is not self._source():
                continue  # the local debugpy adapter, replaced by a remote one (attach)
            try:
                self._from_server(message)
            except Exception:
                log.exception("tensor-dap: handling a debugpy message failed")
                self.to_client(message)
        if source is not self._source():
            return
        if not self._terminated:
            self._terminated = True
            self.to_client({"type": "event", "event": "terminated", "body": {}})
        self.client.closed = True
        with contextlib.suppress(OSError):
            self.client_in.close()

    def _from_client(self, message: Message) -> None:
        if message.get("type") == "response":
            # the client answers a reverse request under the number we gave it: give debugpy back
            # the number it used
            with self._seq_lock:
                original = self._reverse.pop(message.get("request_seq", -1), None)
            if original is not None:
                message = dict(message, request_seq=original)
        if message.get("type") == "request":
            handler = self.handlers.get(f"{message.get('command')}_request")
            if handler is not None:
                handler(message)  # raises Refusal to answer it here
        self.server.write(message)

    def _source(self) -> object:
        return self.remote if self.remote is not None else self.server_process

    def _from_server(self, message: Message) -> None:
        kind = message.get("type")
        if kind == "response" and message.get("request_seq") in self._swallow:
            self._swallow.discard(message["request_seq"])
            return  # the proxy's own request
        name = message.get("event") if kind == "event" else message.get("command")
        if kind in ("event", "response"):
            handler = self.handlers.get(f"{name}_{kind}")
            if handler is not None:
                handler(message)
        if kind == "event" and name == "terminated":
            self._terminated = True
        self.to_client(message)

    def to_client(self, message: Message) -> None:
        with self._seq_lock:
            seq = next(self._seq)
            if message.get("type") == "request":  # a reverse request (runInTerminal...)
                self._reverse[seq] = message.get("seq", 0)
            self.client.write(dict(message, seq=seq))

    def tell_client(self, text: str) -> None:
        """A line in the client's debug console, marked important."""
        self.to_client(
            {
                "type": "event",
                "event": "output",
                "body": {"category": "important", "output": f"{text}\n"},
            }
        )

    def _answer(self, request: Message, body: dict[str, Any]) -> None:
        self.to_client(
            {
                "type": "response",
                "request_seq": request.get("seq", 0),
                "success": True,
                "command": request.get("command", ""),
                "body": body,
            }
        )

    def _refuse(self, request: Message, reason: str) -> None:
        if request.get("type") != "request":
            return
        self.to_client(
            {
                "type": "response",
                "request_seq": request.get("seq", 0),
                "success": False,
                "command": request.get("command", ""),
                "message": reason,
            }
        )

    # -- attach to a remote adapter ---------------------------------------------------------
    def use_remote(self, remote: socket.socket) -> None:
        """Talk to the adapter ``debugpy.listen`` started in the program from now on.

        debugpy's stdio adapter cannot connect to it (only VS Code's extension does, by
        connecting its client socket there), so the proxy does what the extension does: it
        replays the client's ``initialize`` there (the answer already went to the client) and
        retires its local debugpy adapter.
        """
        local = self.server_process
        self.remote = remote
        self.server = Writer(remote.makefile("wb"))
        self._reader = self._start_reader(remote.makefile("rb"), remote)
        if self.initialize is not None:
            self._swallow.add(self.initialize["seq"])
            self.server.write(self.initialize)
        with contextlib.suppress(OSError):
            local.stdin.close()  # type: ignore[union-attr]
        threading.Thread(target=_retire, args=(local,), daemon=True).start()

    def _shutdown(self) -> None:
        """The client is gone: end debugpy (and with it the debuggee), leave nothing behind;
        attached, leave the program running, as a debugger that detaches does."""
        attached = self.remote is not None
        if attached or self.server_process.poll() is None:
            self.server.write(
                {
                    "type": "request",
                    "seq": 1_000_000,
                    "command": "disconnect",
                    "arguments": {"terminateDebuggee": not attached},
                }
            )
        if self.remote is not None:
            self._join_reader()
            with contextlib.suppress(OSError):
                self.remote.close()
            return
        process = self.server_process
        if process.poll() is None:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _kill_group(process)
        with contextlib.suppress(OSError):
            process.stdin.close()  # type: ignore[union-attr]


def _retire(process: subprocess.Popen[bytes]) -> None:
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        _kill_group(process)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, 9)
    except (OSError, AttributeError):
        process.kill()
