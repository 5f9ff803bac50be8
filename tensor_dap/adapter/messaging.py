"""DAP framing: ``Content-Length`` headers and JSON bodies over byte streams.

A malformed message must not end a session: :func:`read_message` raises
:class:`MalformedMessage` for a bad body (the stream stays aligned on the next message) and
returns ``None`` only at the end of the stream.
"""

from __future__ import annotations

import json
import threading
from typing import Any, BinaryIO, Optional


class MalformedMessage(ValueError):
    """A message whose header or JSON body could not be read; ``raw`` holds the body."""

    def __init__(self, reason: str, raw: bytes = b"") -> None:
        super().__init__(reason)
        self.raw = raw


def read_message(stream: BinaryIO) -> Optional[dict[str, Any]]:
    """The next message, ``None`` at end of stream."""
    length = None
    while True:
        line = stream.readline()
        if not line:
            return None
        line = line.strip()
        if not line:
            if length is None:
                continue  # stray blank line between messages
            break
        name, _, value = line.decode("ascii", "replace").partition(":")
        if name.strip().lower() == "content-length":
            try:
                length = int(value.strip())
            except ValueError as error:
                raise MalformedMessage(f"bad Content-Length: {value.strip()!r}") from error
    body = b""
    while len(body) < length:
        chunk = stream.read(length - len(body))
        if not chunk:
            return None
        body += chunk
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise MalformedMessage(f"message body is not JSON: {error}", body) from error
    if not isinstance(message, dict) or "type" not in message:
        raise MalformedMessage("message is not a DAP object with a 'type'", body)
    return message


class Writer:
    """Writes messages to one stream; thread-safe."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self.closed = False

    def write(self, message: dict[str, Any]) -> None:
        body = json.dumps(message, separators=(",", ":")).encode("utf-8")
        header = f"Content-Length: {len(body)}\r\n\r\n".encode("ascii")
        with self._lock:
            if self.closed:
                return
            try:
                self._stream.write(header + body)
                self._stream.flush()
            except (OSError, ValueError):
                self.closed = True
