"""Inlay hints of the language server for a 5,000-line file with a 100,000-row trace store.

    python benchmarks/lsp.py [--lines 5000] [--rows 100000] [--in-file 20000] [--requests 50]
        [--visible 100]

Builds a synthetic file (one assignment per line) and a trace store written with ``TraceWriter``:
``--in-file`` rows describe the benchmarked file (2 names x 2 processes per line by default, so
one hint per name), the rest other files. Starts the real server (``tensor-dap lsp``) with a bare
JSON-RPC client, asks for the whole file's hints ``--requests`` times and prints the first
(cold, sent right after ``didOpen``) request, p50 and p95 of the repeated ones; then asks for
``--visible`` lines at a time
(what VS Code sends: the visible range), a new range each time, and prints p50 and p95; and the
server's resident memory before and after. Target: p50 <= 50 ms.
``--in-file 100000`` puts every row in the one file (5 names x 4 processes per line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from tensor_dap.tracedb import Observation, TraceWriter, text_digest

PROCESSES = ["main", "rank 1", "rank 2", "rank 3"]


def build(root: Path, lines: int, rows: int, in_file: int) -> Path:
    source = root / "big.py"
    text = "".join(f"x{i} = torch.zeros({i % 64 + 1}, 10, device=device)\n" for i in range(lines))
    source.write_text(text)
    per_line = max(1, in_file // lines)
    processes = PROCESSES[: 2 if per_line <= 4 else 4]
    names = max(1, per_line // len(processes))
    with TraceWriter(root / ".tensor-dap" / "trace.db") as writer:
        run = writer.begin_run("check", [str(source)], str(root))
        batch: list[Observation] = []
        written = 0

        def flush() -> None:
            writer.add_observations(run, batch)
            batch.clear()

        for i in range(lines):
            for n in range(names):
                for process in processes:
                    batch.append(
                        Observation(
                            str(source),
                            i + 1,
                            f"x{i}" if n == 0 else f"v{n}",
                            (i % 64 + 1, 10),
                            "float32",
                            "cuda:0",
                            n % 2 == 1,
                            None,
                            hits=3,
                            process=process,
                            col=len(f"x{i} = torch.zeros({i % 64 + 1}, 10, device=device)"),
                        )
                    )
                    written += 1
            if len(batch) > 5000:
                flush()
        other = 0
        while written < rows:
            batch.append(
                Observation(
                    str(root / f"other_{other // lines}.py"),
                    other % lines + 1,
                    "t",
                    (8, 8),
                    "float16",
                    "cuda:0",
                    False,
                    None,
                )
            )
            other += 1
            written += 1
            if len(batch) > 5000:
                flush()
        flush()
        writer.record_source(str(source), text_digest(text), run, text)
        writer.end_run(run, {"status": "ok", "code": 0})
    return source


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class RawClient:
    """A bare JSON-RPC client over the server's stdio, so that the timings are the server's
    (plus ``json.loads``, as an editor pays) and not a Python client's object building."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.next_id = 0

    def send(self, method: str, params: Any, request: bool = True) -> Optional[int]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        ident = None
        if request:
            self.next_id += 1
            ident = message["id"] = self.next_id
        body = json.dumps(message).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return ident

    async def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        length = 0
        while True:
            line = await self.process.stdout.readline()
            if line in (b"\r\n", b""):
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        return json.loads(await self.process.stdout.readexactly(length))

    async def request(self, method: str, params: Any) -> Any:
        ident = self.send(method, params)
        while True:
            message = await self.receive()
            if message.get("id") == ident and "method" not in message:
                return message.get("result")


def lines_params(uri: str, first: int, last: int) -> dict[str, Any]:
    """``textDocument/inlayHint`` params for lines ``first`` .. ``last`` of ``uri``."""
    return {
        "textDocument": {"uri": uri},
        "range": {"start": {"line": first, "character": 0}, "end": {"line": last, "character": 0}},
    }


def percentile(ordered: list[float], fraction: float = 0.95) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


async def measure(root: Path, source: Path, lines: int, requests: int, visible: int = 100) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tensor_dap",
        "lsp",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=2**26,
    )
    client = RawClient(process)
    await client.request(
        "initialize", {"processId": None, "rootUri": root.as_uri(), "capabilities": {}}
    )
    client.send("initialized", {}, request=False)
    uri = source.as_uri()
    document = {"uri": uri, "languageId": "python", "version": 1, "text": source.read_text()}
    params = {
        "textDocument": {"uri": uri},
        "range": {"start": {"line": 0, "character": 0}, "end": {"line": lines, "character": 0}},
    }
    before = rss_kib(process.pid)
    times = []
    count = 0
    # cold: the file is opened and its hints asked at once, as an editor does (the store read,
    # the hints built and serialized, next to the diagnostics the open publishes)
    client.send("textDocument/didOpen", {"textDocument": document}, request=False)
    for _ in range(requests + 1):
        start = time.perf_counter()
        hints = await client.request("textDocument/inlayHint", params)
        times.append((time.perf_counter() - start) * 1000)
        count = len(hints or [])
    warm = sorted(times[1:])
    print(f"whole file ({lines} lines), hints per request: {count}")
    print(f"  first request, sent with didOpen (cold: store read, hints built): {times[0]:.1f} ms")
    print(f"  repeated: p50 {statistics.median(warm):.1f} ms  p95 {percentile(warm):.1f} ms")

    # what VS Code sends: the visible lines, here 100, scrolling through the file; each range
    # is new to the server (its serialized response not kept yet)
    times, count = [], 0
    for i in range(requests):
        first = (i * 97) % max(1, lines - visible)
        ranged = lines_params(uri, first, first + visible)
        start = time.perf_counter()
        hints = await client.request("textDocument/inlayHint", ranged)
        times.append((time.perf_counter() - start) * 1000)
        count = len(hints or [])
    times.sort()
    print(f"visible range ({visible} lines), hints per request: {count}")
    p50, p95 = statistics.median(times), percentile(times)
    print(f"  new range each time: p50 {p50:.1f} ms  p95 {p95:.1f} ms")
    # typing: each edit changes one line in the middle (a new document version, so a new text
    # digest); then the visible range around it is asked — the hints are matched to the new
    # lines (alignment) and rebuilt for that text
    times, count = [], 0
    text_lines = document["text"].splitlines(keepends=True)
    for i in range(requests):
        edited = list(text_lines)
        at = lines // 2 + i
        edited[at] = edited[at].rstrip("\n") + f"  # edit {i}\n"
        change = {
            "textDocument": {"uri": uri, "version": 2 + i},
            "contentChanges": [{"text": "".join(edited)}],
        }
        client.send("textDocument/didChange", change, request=False)
        ranged = lines_params(uri, max(0, at - visible // 2), at + visible // 2)
        start = time.perf_counter()
        hints = await client.request("textDocument/inlayHint", ranged)
        times.append((time.perf_counter() - start) * 1000)
        count = len(hints or [])
    times.sort()
    print(f"after each one-line edit, visible range: hints per request {count}")
    p50, p95 = statistics.median(times), percentile(times)
    print(f"  p50 {p50:.1f} ms  p95 {p95:.1f} ms (lines matched to the run's text each time)")
    after = rss_kib(process.pid)
    print(f"server RSS: {before / 1024:.1f} MiB before, {after / 1024:.1f} MiB after")
    await client.request("shutdown", None)
    client.send("exit", None, request=False)
    await process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--in-file", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--visible", type=int, default=100)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        started = time.perf_counter()
        source = build(root, options.lines, options.rows, options.in_file)
        print(
            f"{options.lines} lines, {options.rows} trace rows ({options.in_file} in the file), "
            f"built in {time.perf_counter() - started:.1f} s"
        )
        asyncio.run(measure(root, source, options.lines, options.requests, options.visible))
    return 0


if __name__ == "__main__":
    sys.exit(main())
