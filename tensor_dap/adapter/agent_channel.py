"""The adapter's side of the agent channel: loopback TCP, a random token, JSON lines.

Each debuggee process (and each subprocess debugpy follows) runs an agent that connects here,
proves it knows the token, receives the enabled tensor rules at once, and again whenever the
user ticks or unticks a rule checkbox — also while the program runs. When the client attaches
to a ``tensor-dap run`` process, the agent listens instead and the adapter connects to it
(:meth:`AgentChannel.connect`); the messages are the same.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import socket
import threading
from typing import Any, Optional

from tensor_dap.agent.ranks import scoped

log = logging.getLogger("tensor_dap.adapter")


class AgentChannel:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.token = secrets.token_hex(16)
        self._server = socket.create_server((host, 0))
        self.host, self.port = self._server.getsockname()[:2]
        self._agents: list[socket.socket] = []
        self._lock = threading.Lock()
        self._rules: list[str] = []
        #: the launch's ``tensorRanks`` ("1+3"): every rule sent is limited to these ranks
        self.ranks: Optional[str] = None
        self._closed = False
        threading.Thread(target=self._accept, name="tensor-dap-channel", daemon=True).start()

    def environment(self) -> dict[str, str]:
        """What a debuggee needs to connect (passed in its environment)."""
        return {
            "TENSOR_DAP_AGENT": json.dumps(
                {"host": self.host, "port": self.port, "token": self.token}
            )
        }

    def set_rules(self, rules: list[str]) -> None:
        with self._lock:
            self._rules = scoped(rules, self.ranks)
            agents = list(self._agents)
            message = {"rules": list(self._rules)}
        for agent in agents:
            self._send(agent, message)

    def connect(self, config: dict[str, Any]) -> None:
        """Attach: connect to the listening agent of a ``tensor-dap run`` process."""
        connection = socket.create_connection((config["host"], int(config["port"])), timeout=10)
        connection.sendall(json.dumps({"token": config["token"]}).encode() + b"\n")
        connection.settimeout(None)
        with self._lock:
            if self._closed:
                connection.close()
                return
            self._agents.append(connection)
            rules = list(self._rules)
        self._send(connection, {"rules": rules})

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            for agent in self._agents:
                with contextlib.suppress(OSError):
                    agent.close()
            self._agents.clear()

    def _accept(self) -> None:
        while not self._closed:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._greet, args=(connection,), daemon=True).start()

    def _greet(self, connection: socket.socket) -> None:
        connection.settimeout(10)
        try:
            line = connection.makefile("rb").readline()
            hello = json.loads(line or b"{}")
        except (OSError, ValueError):
            hello = {}
        if not isinstance(hello, dict) or hello.get("token") != self.token:
            log.warning("tensor-dap: refused an agent connection without the session token")
            connection.close()
            return
        connection.settimeout(None)
        with self._lock:
            self._agents.append(connection)
            rules = list(self._rules)
        self._send(connection, {"rules": rules})

    def _send(self, connection: socket.socket, message: dict[str, Any]) -> None:
        try:
            connection.sendall(json.dumps(message).encode() + b"\n")
        except OSError:
            with self._lock:
                if connection in self._agents:
                    self._agents.remove(connection)
