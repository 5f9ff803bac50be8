"""Inlay hints of the language server for a 5,000-line file with a 100,000-row trace store.

    python benchmarks/lsp.py [--lines 5000] [--rows 100000] [--in-file 20000] [--requests 50]

Builds a synthetic file (one assignment per line) and a trace store written with ``TraceWriter``:
``--in-file`` rows describe the benchmarked file (2 names x 2 processes per line by default, so
one hint per name), the rest other files. Starts the real server (``tensor-dap lsp``) with pygls's
client, asks for the whole file's hints ``--requests`` times and prints the first (cold cache)
request, p50 and p95, and the server's resident memory before and after. Target: p50 <= 50 ms.
``--in-file 100000`` puts every row in the one file (5 names x 4 processes per line).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from tensor_dap.trace import Observation, TraceWriter, text_digest

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
        writer.record_source(str(source), text_digest(text), run)
        writer.end_run(run, {"status": "ok", "code": 0})
    return source


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def measure(root: Path, source: Path, lines: int, requests: int) -> None:
    client = LanguageClient("tensor-dap-bench", "1")
    await client.start_io(sys.executable, "-m", "tensor_dap", "lsp")
    assert client._server is not None
    pid = client._server.pid
    await client.initialize_async(
        types.InitializeParams(capabilities=types.ClientCapabilities(), root_uri=root.as_uri())
    )
    client.initialized(types.InitializedParams())
    uri = source.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=1, text=source.read_text()
            )
        )
    )
    params = types.InlayHintParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=types.Range(start=types.Position(line=0, character=0), end=types.Position(lines, 0)),
    )
    await asyncio.sleep(0.5)
    before = rss_kib(pid)
    times = []
    count = 0
    for _ in range(requests + 1):
        start = time.perf_counter()
        hints = await client.text_document_inlay_hint_async(params)
        times.append((time.perf_counter() - start) * 1000)
        count = len(hints or [])
    after = rss_kib(pid)
    warm = sorted(times[1:])
    p95 = warm[min(len(warm) - 1, int(len(warm) * 0.95))]
    print(f"hints per request: {count}")
    print(f"first request (cold cache): {times[0]:.1f} ms")
    print(f"p50: {statistics.median(warm):.1f} ms  p95: {p95:.1f} ms  ({requests} requests)")
    print(f"server RSS: {before / 1024:.1f} MiB before, {after / 1024:.1f} MiB after")
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--in-file", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=50)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        started = time.perf_counter()
        source = build(root, options.lines, options.rows, options.in_file)
        print(
            f"{options.lines} lines, {options.rows} trace rows ({options.in_file} in the file), "
            f"built in {time.perf_counter() - started:.1f} s"
        )
        asyncio.run(measure(root, source, options.lines, options.requests))
    return 0


if __name__ == "__main__":
    sys.exit(main())
