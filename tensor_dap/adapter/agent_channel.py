"""The adapter's end of the agent channel (the protocol: :mod:`tensor_dap.channel_protocol`).

Each debuggee process (and each subprocess debugpy follows) runs an agent that connects here
and receives the enabled tensor rules at once, and again whenever the user ticks or unticks a
rule checkbox — also while the program runs — and, when the program pauses, a request to
flush its trace-store rows (:meth:`AgentChannel.flush`). When the client attaches to a
``tensor-dap run`` process, the agent listens instead and the adapter connects to it
(:meth:`AgentChannel.connect`); the messages are the same.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from typing import IO, Any, Optional

from tensor_dap import channel_protocol
from tensor_dap.agent.ranks import scoped

log = logging.getLogger("tensor_dap.adapter")


class AgentChannel:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self._agents: list[socket.socket] = []
        self._lock = threading.Lock()
        self._rules: list[str] = []
        #: the launch's ``tensorRanks`` ("1+3"): every rule sent is limited to these ranks
        self.ranks: Optional[str] = None
        self._closed = False
        self._listener = channel_protocol.Listener(
            self._greeted, "tensor-dap-channel", host, on_refused=_refused
        )

    def environment(self) -> dict[str, str]:
        """What a debuggee needs to connect (passed in its environment)."""
        return channel_protocol.environment(self._listener.address())

    def set_rules(self, rules: list[str]) -> None:
        with self._lock:
            self._rules = scoped(rules, self.ranks)
        self._broadcast()

    def flush(self) -> None:
        """The program paused: every agent writes its trace-store rows now."""
        self._broadcast(flush=True)

    def _broadcast(self, flush: bool = False) -> None:
        with self._lock:
            agents = list(self._agents)
            message = channel_protocol.rules_message(self._rules, flush)
        for agent in agents:
            self._send(agent, message)

    def connect(self, address: dict[str, Any]) -> None:
        """Attach: connect to the listening agent of a ``tensor-dap run`` process."""
        connection = channel_protocol.connect(address)
        connection.settimeout(None)
        self._add(connection)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for agent in self._agents:
                with contextlib.suppress(OSError):
                    agent.close()
            self._agents.clear()

    def _greeted(self, connection: socket.socket, stream: IO[bytes]) -> None:
        self._add(connection)

    def _add(self, connection: socket.socket) -> None:
        """Keep ``connection`` for later rule sets and send it the current one."""
        with self._lock:
            if self._closed:
                connection.close()
                return
            self._agents.append(connection)
            message = channel_protocol.rules_message(self._rules)
        self._send(connection, message)

    def _send(self, connection: socket.socket, message: dict[str, Any]) -> None:
        try:
            channel_protocol.send(connection, message)
        except OSError:
            with self._lock:
                if connection in self._agents:
                    self._agents.remove(connection)


def _refused() -> None:
    log.warning("tensor-dap: refused an agent connection without the session token")
