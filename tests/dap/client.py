"""A small real DAP client: starts ``tensor-dap adapter`` and talks to it over stdio."""

from __future__ import annotations

import contextlib
import itertools
import queue
import subprocess
import sys
import threading
from typing import Any, Callable, Optional

from tensor_dap.adapter.messaging import MalformedMessage, Writer, read_message


class DapClient:
    def __init__(self, command: Optional[list[str]] = None, cwd: Optional[str] = None) -> None:
        self.process = subprocess.Popen(
            command or [sys.executable, "-m", "tensor_dap", "adapter"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
        )
        self.writer = Writer(self.process.stdin)
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self._seq = itertools.count(1)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                message = read_message(self.process.stdout)
            except MalformedMessage:
                continue
            except (OSError, ValueError):
                return
            if message is None:
                self.messages.put({"type": "eof"})
                return
            self.messages.put(message)

    def send(self, command: str, arguments: Optional[dict[str, Any]] = None) -> int:
        seq = next(self._seq)
        self.writer.write(
            {"seq": seq, "type": "request", "command": command, "arguments": arguments or {}}
        )
        return seq

    def send_raw(self, data: bytes) -> None:
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def next(self, match: Callable[[dict[str, Any]], bool], timeout: float = 60) -> dict[str, Any]:
        """The first message matching ``match`` (others are kept in ``seen``)."""
        for index, message in enumerate(self.seen):
            if match(message):
                return self.seen.pop(index)
        while True:
            message = self.messages.get(timeout=timeout)
            if match(message):
                return message
            if message.get("type") == "eof":
                raise EOFError(f"adapter closed; seen: {self.seen[-10:]}")
            self.seen.append(message)

    def response(self, seq: int, timeout: float = 60) -> dict[str, Any]:
        return self.next(
            lambda m: m.get("type") == "response" and m.get("request_seq") == seq, timeout
        )

    def request(self, command: str, arguments: Optional[dict[str, Any]] = None, **kw: Any):
        return self.response(self.send(command, arguments), **kw)

    def event(self, name: str, timeout: float = 60) -> dict[str, Any]:
        return self.next(lambda m: m.get("type") == "event" and m.get("event") == name, timeout)

    def start(
        self,
        program: str,
        filters: list[str],
        breakpoints: Optional[dict[str, list[int]]] = None,
        **launch: Any,
    ) -> dict[str, Any]:
        """initialize, launch, breakpoints, configurationDone — the order VS Code uses."""
        init = self.request(
            "initialize",
            {
                "clientID": "pytest",
                "adapterID": "tensor-dap",
                "linesStartAt1": True,
                "columnsStartAt1": True,
                "pathFormat": "path",
            },
        )
        self.send("launch", {"program": program, "console": "internalConsole", **launch})
        self.event("initialized")
        for path, lines in (breakpoints or {}).items():
            self.request(
                "setBreakpoints",
                {"source": {"path": path}, "breakpoints": [{"line": n} for n in lines]},
            )
        self.request("setExceptionBreakpoints", {"filters": filters})
        self.request("configurationDone")
        return init

    def top_frame(self, thread_id: int) -> dict[str, Any]:
        trace = self.request("stackTrace", {"threadId": thread_id, "levels": 5})
        return trace["body"]["stackFrames"][0]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
