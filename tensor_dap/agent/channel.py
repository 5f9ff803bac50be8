"""The agent's end of the channel to the debug adapter (its protocol:
:mod:`tensor_dap.channel_protocol`).

Launch: the adapter listens; the agent connects to the address and token the adapter put in
its environment (:class:`ChannelClient`). Attach (``tensor-dap run``): the agent listens with
its own token and publishes its address for the adapter to find (:class:`ChannelListener`).
Either way each rule set the adapter sends is delivered to a callback, from a daemon thread,
and each request to flush (the program paused) to another.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import threading
from typing import IO, Any, Callable, Optional

from tensor_dap import channel_protocol
from tensor_dap.agent.threads import start_tool_thread

RulesCallback = Callable[[list[str]], None]
FlushCallback = Optional[Callable[[], None]]
Send = Callable[[dict[str, Any]], None]
#: called with each message of the adapter other than a rule set, and how to answer it
MessageCallback = Callable[[dict[str, Any], Send], None]


def _deliver(
    stream: IO[bytes],
    on_rules: RulesCallback,
    on_flush: FlushCallback = None,
    on_message: Optional[MessageCallback] = None,
    connection: Optional[socket.socket] = None,
) -> None:
    send = _sender(connection) if connection is not None else None
    for message in channel_protocol.messages(stream):
        rules = channel_protocol.rules_of(message)
        if rules is not None:
            if message.get("flush"):  # the program paused: the rules are unchanged
                if on_flush is not None:
                    on_flush()
                continue
            on_rules(rules)
        elif on_message is not None and send is not None:
            on_message(message, send)
        # (any other message is ignored: rule sets keep coming)


def _sender(connection: socket.socket) -> Send:
    """Messages to the adapter from any thread, one line at a time."""
    lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        with lock:
            channel_protocol.send(connection, message)

    return send


class ChannelClient:
    """Launch: connected to the adapter, with its first rule set (None when it sent none)."""

    def __init__(
        self,
        address: dict[str, Any],
        on_rules: RulesCallback,
        on_flush: FlushCallback = None,
        on_message: Optional[MessageCallback] = None,
    ) -> None:
        self._on_rules = on_rules
        self._socket = channel_protocol.connect(address, pid=os.getpid())
        self._stream = self._socket.makefile("rb")
        self.first_rules = channel_protocol.read_rules(self._stream)
        self._socket.settimeout(None)
        start_tool_thread(
            _deliver,
            "tensor-dap-agent",
            (self._stream, on_rules, on_flush, on_message, self._socket),
        )


class ChannelListener:
    """Attach: the agent's own loopback listener for adapters that attach to a running
    program, its address published until the program ends."""

    def __init__(
        self,
        on_rules: RulesCallback,
        host: str = "127.0.0.1",
        on_flush: FlushCallback = None,
        on_message: Optional[MessageCallback] = None,
    ) -> None:
        self._on_rules = on_rules
        self._on_flush = on_flush
        self._on_message = on_message
        #: set once an adapter has authenticated and sent its first rule set
        self.first_rules = threading.Event()
        self._listener = channel_protocol.Listener(self._serve, "tensor-dap-agent", host)
        self.path = channel_protocol.publish(self._listener.address())
        atexit.register(self.close)

    def close(self) -> None:
        self._listener.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def _serve(self, connection: socket.socket, stream: IO[bytes]) -> None:
        def on_rules(rules: list[str]) -> None:
            self._on_rules(rules)
            self.first_rules.set()

        with connection:
            _deliver(stream, on_rules, self._on_flush, self._on_message, connection)
