"""Training-loop time under the debug adapter: ``python benchmarks/adapter.py``.

Runs the MLP workload of :mod:`workloads` as a debuggee, side by side in one run, under plain
debugpy (``python -m debugpy.adapter``), under ``tensor-dap adapter`` with no tensor rule
enabled and with the default rules — each with the trace store written (what every session
does) and with ``"traceStore": false``; the debuggee times its own loop (after a warm-up), so
start-up is not counted, in CPU time of the whole process (the store's flush thread included),
which other work on the machine disturbs less than the wall clock. Prints the ratios to plain
debugpy (targets: ≤ 1.02× with no rule and no store, ≤ 1.3× with the default rules).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tests.dap.client import DapClient  # noqa: E402

DEBUGGEE = textwrap.dedent(
    f"""
    import sys, time
    sys.path.insert(0, {HERE!r})
    import torch
    torch.set_num_threads(1)
    from workloads import make_mlp_step
    steps = make_mlp_step()
    steps(20)
    start = time.process_time()
    steps(int(sys.argv[1]))
    print("LOOP", time.process_time() - start, flush=True)
    """
)


def run_once(
    command: list[str], script: str, steps: int, rules: list[str], **launch: object
) -> float:
    client = DapClient(command)
    try:
        client.start(script, [], args=[str(steps)], tensorBreakpoints=rules, **launch)
        seen = ""
        while True:
            seen += client.event("output", timeout=300)["body"].get("output", "")
            match = re.search(r"LOOP ([0-9.e-]+)\n", seen)
            if match:
                return float(match.group(1))
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    options = parser.parse_args()
    script = os.path.join(tempfile.mkdtemp(), "debuggee.py")
    with open(script, "w") as out:
        out.write(DEBUGGEE)
    plain = [sys.executable, "-m", "debugpy.adapter"]
    ours = [sys.executable, "-m", "tensor_dap", "adapter"]
    modes: dict[str, tuple[list[str], dict[str, object]]] = {
        "no rule, no store": ([], {"traceStore": False}),
        "no rule, store": ([], {}),
        "default rules, no store": (["default"], {"traceStore": False}),
        "default rules, store": (["default"], {}),
    }
    ratios: dict[str, list[float]] = {label: [] for label in modes}
    base_times = []
    for _ in range(options.rounds):
        base = run_once(plain, script, options.steps, [])
        base_times.append(base)
        for label, (rules, launch) in modes.items():
            ratios[label].append(run_once(ours, script, options.steps, rules, **launch) / base)
    per_step = statistics.median(base_times) / options.steps * 1e6
    print(f"MLP 784-256-10 step under plain debugpy: {per_step:.0f} µs")
    for label, values in ratios.items():
        print(f"  tensor-dap adapter, {label:24s} {statistics.median(values):.2f}× plain debugpy")


if __name__ == "__main__":
    main()
