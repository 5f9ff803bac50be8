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
import itertools
import logging
import socket
import threading
import time
from typing import IO, Any, Callable, Optional

from tensor_dap import channel_protocol
from tensor_dap.agent.ranks import scoped
from tensor_dap.agent.threads import start_tool_thread

log = logging.getLogger("tensor_dap.adapter")


class AgentChannel:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self._agents: list[socket.socket] = []
        self._lock = threading.Lock()
        self._rules: list[str] = []
        #: the launch's ``tensorRanks`` ("1+3"): every rule sent is limited to these ranks
        self.ranks: Optional[str] = None
        self._closed = False
        #: what an agent says on its own (not a reply): the data breakpoints' notices
        self.on_message: Optional[Callable[[dict[str, Any]], None]] = None
        self._asks = itertools.count(1)
        #: number of a question (:meth:`ask`) -> the replies so far
        self._replies: dict[int, list[dict[str, Any]]] = {}
        self._replied = threading.Condition()
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
        start_tool_thread(self._listen, "tensor-dap-channel-reader", (connection.makefile("rb"),))

    def ask(self, message: dict[str, Any], timeout: float = 3.0) -> list[dict[str, Any]]:
        """Send ``message`` to every agent and wait (``timeout`` at most) for their replies."""
        number = next(self._asks)
        with self._replied:
            self._replies[number] = []
        with self._lock:
            agents = list(self._agents)
        sent = 0
        for agent in agents:
            self._send(agent, dict(message, request=number))
            with self._lock:
                sent += agent in self._agents
        deadline = time.monotonic() + timeout
        with self._replied:
            while len(self._replies[number]) < sent and time.monotonic() < deadline:
                self._replied.wait(max(deadline - time.monotonic(), 0.01))
            return self._replies.pop(number)

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
        self._listen(stream)

    def _listen(self, stream: IO[bytes]) -> None:
        """What one agent says, until it goes: replies to :meth:`ask`, else ``on_message``."""
        for message in channel_protocol.messages(stream):
            number = message.get("reply")
            if number is not None:
                with self._replied:
                    if number in self._replies:
                        self._replies[number].append(message)
                        self._replied.notify_all()
            elif self.on_message is not None:
                self.on_message(message)

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
