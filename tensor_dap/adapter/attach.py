"""``attach``: to a subprocess debugpy follows, or to a program ``tensor-dap run`` started.

A subprocess's agent reaches the launching session's channel by itself. A ``tensor-dap run``
program listens twice: debugpy (``connect``: the proxy talks to that adapter from now on,
:meth:`~tensor_dap.adapter.proxy.Proxy.use_remote`) and the agent, whose address the proxy
finds from the pid in debugpy's ``process`` event.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from tensor_dap.adapter.agent_channel import AgentChannel
from tensor_dap.adapter.launch import hide_own_frames
from tensor_dap.adapter.proxy import Message, Proxy, Refusal
from tensor_dap.adapter.tensor_breakpoints import TensorBreakpoints
from tensor_dap.channel_protocol import find_agent


class Attach:
    def __init__(self, proxy: Proxy, breakpoints: TensorBreakpoints) -> None:
        self.proxy = proxy
        self.breakpoints = breakpoints
        self.channel: AgentChannel = breakpoints.channel
        #: attached to a ``tensor-dap run`` program (not a subprocess): look for its agent
        self._attaching = False

    def request(self, message: Message) -> None:
        arguments = message.setdefault("arguments", {})
        self.breakpoints.take(message)
        connect = arguments.get("connect")
        if isinstance(connect, dict) and self.proxy.remote is None:
            try:
                self._connect_remote(connect)
            except (OSError, ValueError, TypeError) as error:
                raise Refusal(f"cannot reach the program to attach to: {error}") from error
        # a subprocess the launched program started (debugpyAttach): its agent reaches this
        # session's channel by itself, there is no `tensor-dap run` agent to look for
        self._attaching = "subProcessId" not in arguments
        hide_own_frames(arguments)

    def _connect_remote(self, connect: dict[str, Any]) -> None:
        address = (str(connect.get("host") or "127.0.0.1"), int(connect["port"]))
        remote = socket.create_connection(address, timeout=10)
        remote.settimeout(None)
        self.proxy.use_remote(remote)

    def process_event(self, message: Message) -> None:
        """Reach the agent of the ``tensor-dap run`` process debugpy connected to."""
        pid = (message.get("body") or {}).get("systemProcessId")
        if self._attaching and isinstance(pid, int):
            threading.Thread(target=self._connect_agent, args=(pid,), daemon=True).start()

    def _connect_agent(self, pid: int) -> None:
        address = find_agent(pid)
        try:
            if address is None:
                raise OSError(f"process {pid} was not started with `tensor-dap run`")
            self.channel.connect(address)
        except OSError as error:
            self.proxy.tell_client(f"tensor-dap: no tensor breakpoints here: {error}")
