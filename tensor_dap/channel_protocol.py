"""The agent channel's protocol, shared by its two ends: the debug adapter
(:mod:`tensor_dap.adapter.agent_channel`) and the agent in the debuggee
(:mod:`tensor_dap.agent.channel`).

Loopback TCP, one JSON object a line. The end that connects first sends a hello,
``{"token": ...}`` (the agent adds its ``"pid"``); the listening end closes, without a word, a
connection whose token is not its own. Then the adapter sends rule sets, ``{"rules": [...]}``,
at once and whenever the user ticks or unticks a rule, and the same set marked
``{"rules": [...], "flush": true}`` when the program paused: the agent writes what it has into
the trace store at once (an agent that does not know the mark just takes the rules again).
Which end listens depends on who started first, the messages do not:

- launch: the adapter listens and passes its address and token to the debuggee in
  ``$TENSOR_DAP_AGENT`` (:func:`environment`, :func:`address_from_environment`);
- attach to ``tensor-dap run``: the agent listens and publishes ``{"host", "port", "token",
  "pid"}`` in a file only the user can read, ``<runtime dir>/tensor-dap-<uid>/agent-<pid>.json``
  (:func:`publish`); the adapter finds it from the pid in debugpy's ``process`` event
  (:func:`find_agent`).

It imports no torch: the adapter loads it.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
import socket
import stat
import tempfile
from typing import IO, Any, Callable, Iterator, Optional

from tensor_dap.agent.threads import start_tool_thread

ENV = "TENSOR_DAP_AGENT"
HELLO_TIMEOUT_S = 10.0
"""How long either end waits for the other's first line."""
HELLO_LIMIT = 4096
"""The longest hello a listener reads."""

Peer = Callable[[socket.socket, IO[bytes]], None]
"""Called with a connection that said the token, and its reading stream."""


def send(connection: socket.socket, message: dict[str, Any]) -> None:
    """One message, as a JSON line (``OSError`` when the other end is gone)."""
    connection.sendall(json.dumps(message).encode() + b"\n")


def read(stream: IO[bytes], limit: int = -1) -> Optional[dict[str, Any]]:
    """The next message; ``None`` at the end of ``stream`` or for a line that is not an object
    (``ValueError`` for one that is not JSON)."""
    line = stream.readline(limit)
    if not line:
        return None
    message = json.loads(line)
    return message if isinstance(message, dict) else None


def messages(stream: IO[bytes]) -> Iterator[dict[str, Any]]:
    """Each message on ``stream`` until its end (or a line that is not a JSON object)."""
    while True:
        try:
            message = read(stream)
        except (OSError, ValueError):
            return
        if message is None:
            return
        yield message


def rules_message(rules: list[str], flush: bool = False) -> dict[str, Any]:
    return {"rules": list(rules), "flush": True} if flush else {"rules": list(rules)}


def rules_of(message: Optional[dict[str, Any]]) -> Optional[list[str]]:
    """The rule set a message carries (None: none)."""
    rules = message.get("rules") if message is not None else None
    return [str(r) for r in rules] if isinstance(rules, list) else None


def read_rules(stream: IO[bytes]) -> Optional[list[str]]:
    """The next rule set on ``stream``; ``None`` at its end (or for a message without one)."""
    return rules_of(read(stream))


def connect(address: dict[str, Any], **hello: Any) -> socket.socket:
    """A connection to the listening end at ``address`` (``host``, ``port``, ``token``), the
    hello sent; it still times out after :data:`HELLO_TIMEOUT_S` until the caller says not."""
    connection = socket.create_connection(
        (address["host"], int(address["port"])), timeout=HELLO_TIMEOUT_S
    )
    try:
        send(connection, {"token": address["token"], **hello})
    except OSError:
        connection.close()
        raise
    return connection


class Listener:
    """A loopback listener with its own random token. Each connection that says the token
    goes to ``on_peer`` in a thread of its own; ``on_refused`` hears of the others."""

    def __init__(
        self,
        on_peer: Peer,
        name: str,
        host: str = "127.0.0.1",
        on_refused: Optional[Callable[[], None]] = None,
    ) -> None:
        self.token = secrets.token_hex(16)
        self._on_peer = on_peer
        self._on_refused = on_refused
        self._name = name
        self._server = socket.create_server((host, 0))
        self.host, self.port = self._server.getsockname()[:2]
        self.closed = False
        start_tool_thread(self._accept, name)

    def address(self) -> dict[str, Any]:
        return {"host": self.host, "port": self.port, "token": self.token}

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self._server.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            start_tool_thread(self._greet, f"{self._name}-peer", (connection,))

    def _greet(self, connection: socket.socket) -> None:
        connection.settimeout(HELLO_TIMEOUT_S)
        try:
            stream = connection.makefile("rb")
            hello = read(stream, HELLO_LIMIT)
        except (OSError, ValueError):
            hello = None
        token = hello.get("token") if hello is not None else None
        if not isinstance(token, str) or not hmac.compare_digest(token, self.token):
            connection.close()
            if self._on_refused is not None:
                self._on_refused()
            return
        connection.settimeout(None)
        self._on_peer(connection, stream)


# -- launch: the address in the debuggee's environment --------------------------------------
def environment(address: dict[str, Any]) -> dict[str, str]:
    """What a debuggee needs to connect to the adapter, as environment variables."""
    return {ENV: json.dumps({key: address[key] for key in ("host", "port", "token")})}


def address_from_environment() -> Optional[dict[str, Any]]:
    """The adapter's address :func:`environment` passed to this process, if any."""
    raw = os.environ.get(ENV)
    if not raw:
        return None
    try:
        address = json.loads(raw)
    except ValueError:
        return None
    return address if isinstance(address, dict) and "port" in address else None


# -- attach: the listening agent's address in a private file ---------------------------------
def agent_folders() -> list[str]:
    """Where agents publish their address, most specific first (per user, mode 0700)."""
    name = f"tensor-dap-{os.getuid()}" if hasattr(os, "getuid") else "tensor-dap"
    roots = [os.environ.get("XDG_RUNTIME_DIR") or "", tempfile.gettempdir()]
    return [os.path.join(root, name) for root in roots if root and os.path.isdir(root)]


def _private_folder() -> str:
    for folder in agent_folders():
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
        if _trusted(folder, folder=True):
            return folder
    raise OSError("tensor-dap: no private folder for the agent address")


def _trusted(path: str, folder: bool = False) -> bool:
    """Ours, not a link, and nobody else may write it (nor read it, for the file)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    kind_ok = stat.S_ISDIR(info.st_mode) if folder else stat.S_ISREG(info.st_mode)
    owner_ok = not hasattr(os, "getuid") or info.st_uid == os.getuid()
    return kind_ok and owner_ok and info.st_mode & 0o077 == 0


def publish(address: dict[str, Any]) -> str:
    """Write this process's listening ``address`` where :func:`find_agent` looks; its path."""
    pid = os.getpid()
    path = os.path.join(_private_folder(), f"agent-{pid}.json")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a stale file of an earlier process with this pid
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        json.dump({**address, "pid": pid}, file)
    return path


def find_agent(pid: int) -> Optional[dict[str, Any]]:
    """The address a ``tensor-dap run`` agent with this pid published, if it is ours."""
    for folder in agent_folders():
        path = os.path.join(folder, f"agent-{int(pid)}.json")
        if not (_trusted(folder, folder=True) and _trusted(path)):
            continue
        try:
            with open(path, encoding="utf-8") as file:
                address = json.load(file)
        except (OSError, ValueError):
            continue
        if isinstance(address, dict) and address.get("pid") == pid and "token" in address:
            return address
    return None
