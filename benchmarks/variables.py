"""``variables`` latency and debuggee memory for a heavy frame: ``python benchmarks/variables.py``.

A debuggee pauses at a breakpoint in a frame holding 1,000 tensors and one of 100M elements
(float32, 400 MB). Through ``tensor-dap adapter`` and through plain ``debugpy`` (both load the
``pydevd_plugins`` renderers when tensor_dap is installed), the frame's ``variables`` request is
timed (p50 over ``--repeat`` requests, after one warm-up) and the debuggee's RSS (VmRSS of
``/proc/<pid>/status``, pid from the DAP ``process`` event) is read before and after.
Targets (issue 3): p50 <= 100 ms, RSS growth < 10 MB.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.dap.client import DapClient  # noqa: E402

DEBUGGEE = """\
import torch

def frame():
    tensors = {f"t{i}": torch.randn(8, 8, requires_grad=i % 2 == 0) for i in range(1000)}
    locals().update(tensors)
    huge = torch.ones(100_000_000)
    print("paused")  # @stop
    return huge, tensors

frame()
"""

# The floor: the same frame with ints instead of tensors (pydevd's own per-variable cost).
BASELINE = DEBUGGEE.replace("torch.randn(8, 8, requires_grad=i % 2 == 0)", "i").replace(
    "torch.ones(100_000_000)", "0"
)

ADAPTERS = {"tensor-dap": None, "debugpy": [sys.executable, "-m", "debugpy.adapter"]}


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def measure(name: str, script: Path, repeat: int) -> dict[str, float]:
    """p50/max latency (ms) of the frame's ``variables`` and the debuggee's RSS growth (MB)."""
    line = DEBUGGEE.splitlines().index('    print("paused")  # @stop') + 1
    client = DapClient(ADAPTERS[name])
    try:
        client.start(str(script), [], breakpoints={str(script): [line]})
        pid = client.event("process", timeout=120)["body"]["systemProcessId"]
        stopped = client.event("stopped", timeout=120)["body"]
        frame = client.top_frame(stopped["threadId"])
        scopes = client.request("scopes", {"frameId": frame["id"]})["body"]["scopes"]
        reference = scopes[0]["variablesReference"]
        before = rss_kb(pid)
        client.request("variables", {"variablesReference": reference})  # warm-up
        times, count = [], 0
        for _ in range(repeat):
            start = time.perf_counter()
            body = client.request("variables", {"variablesReference": reference})["body"]
            times.append((time.perf_counter() - start) * 1000)
            count = len(body["variables"])
        after = rss_kb(pid)
        shown = {v["name"]: v["value"] for v in body["variables"]}
        assert shown["huge"] in ("0", "tensor<(100000000,) float32 cpu>"), shown["huge"]
        client.send("disconnect", {"terminateDebuggee": True})
    finally:
        client.close()
    return {
        "variables": count,
        "p50_ms": statistics.median(times),
        "max_ms": max(times),
        "rss_growth_mb": (after - before) / 1024,
        "rss_mb": after / 1024,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--baseline", action="store_true", help="also time a frame of ints")
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "heavy_frame.py"
        script.write_text(DEBUGGEE)
        baseline = Path(tmp) / "int_frame.py"
        baseline.write_text(BASELINE)
        print(
            f"{'adapter':<12} {'vars':>5} {'p50 ms':>8} {'max ms':>8} {'RSS +MB':>8} {'RSS MB':>8}"
        )
        for name in ADAPTERS:
            r = measure(name, script, args.repeat)
            print(
                f"{name:<12} {r['variables']:>5} {r['p50_ms']:>8.1f} {r['max_ms']:>8.1f}"
                f" {r['rss_growth_mb']:>8.2f} {r['rss_mb']:>8.0f}"
            )
            ok = ok and r["p50_ms"] <= 100 and r["rss_growth_mb"] < 10
            if args.baseline:
                r = measure(name, baseline, args.repeat)
                label = f"{name} ints"
                print(f"{label:<15} {r['p50_ms']:>8.1f} {r['max_ms']:>8.1f}  (floor: no tensors)")
    print("targets (p50 <= 100 ms, RSS growth < 10 MB):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
