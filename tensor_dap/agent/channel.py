"""The agent's side of the channel to the debug adapter (see ``adapter/agent_channel.py``).

Launch: the adapter listens; the agent connects to the loopback address and token the adapter
put in ``TENSOR_DAP_AGENT`` (:class:`ChannelClient`).

Attach (``tensor-dap run``): the agent listens on loopback with its own random token
(:class:`ChannelListener`) and publishes ``{"host", "port", "token", "pid"}`` in a file only
the user can read, ``<runtime dir>/tensor-dap-<uid>/agent-<pid>.json``; the adapter finds it
from the pid in debugpy's ``process`` event (:func:`find_agent`), connects and sends the token.

Either way each rule set the adapter sends (JSON lines ``{"rules": [...]}``) is delivered to a
callback, from a daemon thread.
"""

from __future__ import annotations

import atexit
import contextlib
import hmac
import json
import os
import secrets
import socket
import stat
import tempfile
import threading
from typing import IO, Any, Callable, Optional

from tensor_dap.agent.threads import start_tool_thread

ENV = "TENSOR_DAP_AGENT"
RulesCallback = Callable[[list[str]], None]


def agent_config() -> Optional[dict[str, Any]]:
    raw = os.environ.get(ENV)
    if not raw:
        return None
    try:
        config = json.loads(raw)
    except ValueError:
        return None
    return config if isinstance(config, dict) and "port" in config else None


def read_rules(stream: IO[bytes]) -> Optional[list[str]]:
    """The next rule set on ``stream``; ``None`` at its end (or for a message without one)."""
    line = stream.readline()
    if not line:
        return None
    message = json.loads(line)
    rules = message.get("rules") if isinstance(message, dict) else None
    return [str(r) for r in rules] if isinstance(rules, list) else None


def _deliver(stream: IO[bytes], on_rules: RulesCallback) -> None:
    while True:
        try:
            rules = read_rules(stream)
        except (OSError, ValueError):
            return
        if rules is None:
            return
        on_rules(rules)


class ChannelClient:
    def __init__(self, config: dict[str, Any], on_rules: RulesCallback) -> None:
        self._on_rules = on_rules
        self._socket = socket.create_connection((config["host"], int(config["port"])), timeout=10)
        self._socket.sendall(
            json.dumps({"token": config["token"], "pid": os.getpid()}).encode() + b"\n"
        )
        self._stream = self._socket.makefile("rb")
        self.first_rules = read_rules(self._stream)
        self._socket.settimeout(None)
        start_tool_thread(_deliver, "tensor-dap-agent", (self._stream, on_rules))


# -- attach: the agent listens --------------------------------------------------------------
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


def find_agent(pid: int) -> Optional[dict[str, Any]]:
    """The address a ``tensor-dap run`` agent with this pid published, if it is ours."""
    for folder in agent_folders():
        path = os.path.join(folder, f"agent-{int(pid)}.json")
        if not (_trusted(folder, folder=True) and _trusted(path)):
            continue
        try:
            with open(path, encoding="utf-8") as file:
                config = json.load(file)
        except (OSError, ValueError):
            continue
        if isinstance(config, dict) and config.get("pid") == pid and "token" in config:
            return config
    return None


class ChannelListener:
    """The agent's own loopback listener for adapters that attach to a running program."""

    def __init__(self, on_rules: RulesCallback, host: str = "127.0.0.1") -> None:
        self._on_rules = on_rules
        self.token = secrets.token_hex(16)
        self._server = socket.create_server((host, 0))
        self.host, self.port = self._server.getsockname()[:2]
        self._closed = False
        #: set once an adapter has authenticated and sent its first rule set
        self.first_rules = threading.Event()
        self.path = self._publish()
        atexit.register(self.close)
        start_tool_thread(self._accept, "tensor-dap-agent")

    def _publish(self) -> str:
        pid = os.getpid()
        path = os.path.join(_private_folder(), f"agent-{pid}.json")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a stale file of an earlier process with this pid
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump({"host": self.host, "port": self.port, "token": self.token, "pid": pid}, file)
        return path

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def _accept(self) -> None:
        while not self._closed:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            start_tool_thread(self._serve, "tensor-dap-agent-client", (connection,))

    def _serve(self, connection: socket.socket) -> None:
        with connection:
            connection.settimeout(10)
            try:
                stream = connection.makefile("rb")
                hello = json.loads(stream.readline(4096) or b"{}")
            except (OSError, ValueError):
                return
            token = hello.get("token") if isinstance(hello, dict) else None
            if not isinstance(token, str) or not hmac.compare_digest(token, self.token):
                return  # refused: closed without a word
            connection.settimeout(None)

            def on_rules(rules: list[str]) -> None:
                self._on_rules(rules)
                self.first_rules.set()

            _deliver(stream, on_rules)
