"""``tensor-dap adapter``: speak DAP on stdin/stdout (how editors start adapters) or, with
``--port``, on one loopback TCP connection."""

from __future__ import annotations

import logging
import socket
import sys
from typing import Optional

from tensor_dap.adapter.session import ProxySession


def serve_stdio(rules: Optional[str] = None) -> int:
    return ProxySession(sys.stdin.buffer, sys.stdout.buffer, ticked=rules).run()


def serve_port(
    port: int, host: str = "127.0.0.1", ready: Optional[object] = None, rules: Optional[str] = None
) -> int:
    with socket.create_server((host, port)) as server:
        print(f"tensor-dap adapter listening on {host}:{server.getsockname()[1]}", file=sys.stderr)
        connection, _ = server.accept()
    with connection:
        stream_in = connection.makefile("rb")
        stream_out = connection.makefile("wb")
        return ProxySession(stream_in, stream_out, ticked=rules).run()


def main(port: Optional[int] = None, host: str = "127.0.0.1", rules: Optional[str] = None) -> int:
    """``rules``: ``--rules``, the rules the coming launch turns on (see
    :class:`~tensor_dap.adapter.tensor_breakpoints.TensorBreakpoints`)."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    return serve_stdio(rules) if port is None else serve_port(port, host, rules=rules)
