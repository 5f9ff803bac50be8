"""The agent's side of the channel to the debug adapter (see ``adapter/agent_channel.py``).

Connects to the loopback address and token the adapter put in ``TENSOR_DAP_AGENT``, then
delivers each rule set the adapter sends to a callback, from a daemon thread.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from typing import Any, Callable, Optional

ENV = "TENSOR_DAP_AGENT"


def agent_config() -> Optional[dict[str, Any]]:
    raw = os.environ.get(ENV)
    if not raw:
        return None
    try:
        config = json.loads(raw)
    except ValueError:
        return None
    return config if isinstance(config, dict) and "port" in config else None


class ChannelClient:
    def __init__(self, config: dict[str, Any], on_rules: Callable[[list[str]], None]) -> None:
        self._on_rules = on_rules
        self._socket = socket.create_connection((config["host"], int(config["port"])), timeout=10)
        self._socket.sendall(
            json.dumps({"token": config["token"], "pid": os.getpid()}).encode() + b"\n"
        )
        self._stream = self._socket.makefile("rb")
        self.first_rules = self._read_rules()
        self._socket.settimeout(None)
        threading.Thread(target=self._loop, name="tensor-dap-agent", daemon=True).start()

    def _read_rules(self) -> Optional[list[str]]:
        line = self._stream.readline()
        if not line:
            return None
        message = json.loads(line)
        rules = message.get("rules")
        return [str(r) for r in rules] if isinstance(rules, list) else None

    def _loop(self) -> None:
        while True:
            try:
                rules = self._read_rules()
            except (OSError, ValueError):
                return
            if rules is None:
                return
            self._on_rules(rules)
