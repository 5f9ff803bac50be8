"""The CUDA scripts on a real GPU against their markers and the simulation:
``python benchmarks/real_cuda.py`` (on a machine with a GPU).

``--simulate cuda`` exists so that CUDA bugs show on a machine without a GPU; its promise is that
a script's findings there are the findings a GPU run gives, at the same lines. This runs each
single-process CUDA script of ``sample_project/`` and ``tests/simulate/scripts/`` three ways,
side by side: plain ``python`` on the GPU, ``tensor-dap check --rules all`` on the GPU, and
``tensor-dap check --rules all --simulate cuda``; and prints per script:

- ``markers``: the GPU run's findings are the ``# expect: RULE`` markers (what the tests assert
  under the simulation);
- ``sim``: the simulated run's findings (rule, line) are the GPU run's, and so are their messages;
- ``same``: the GPU check's stdout and the program's exit (0 or not, in the report) are plain
  Python's;
- ``ratio``: wall time of the GPU check over plain (start-up included).

The multi-process scripts (``ddp_*``, ``ranks``, ``spawns``) need several GPUs or torchrun and
are left out. ``--json PATH`` writes every run's findings, messages and outputs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import expected_findings, script_options  # noqa: E402

MULTI_PROCESS = ("ddp_", "ranks", "spawns", "child_bug")
_WORKER_EXPECT = re.compile(r"#\s*expect\[[^\]]+\]:\s*([a-z-]+)")


def expected(script: Path) -> list[tuple[str, int]]:
    """What a GPU run must report: the ``# expect: RULE`` markers, those a worker process
    reports (``# expect[worker]: RULE``), and the seeded device bugs' ``# BUG`` lines
    (``tests/simulate/test_simulate_cuda.py``: a device mismatch each)."""
    found = set(expected_findings(script))
    for number, text in enumerate(script.read_text().splitlines(), start=1):
        match = _WORKER_EXPECT.search(text)
        if match:
            found.add((match.group(1), number))
        if script.name.startswith("seed_") and text.rstrip().endswith("# BUG"):
            found.add(("device-mismatch", number))
    return sorted(found)


def scripts() -> list[Path]:
    found = sorted((ROOT / "sample_project").glob("*.py"))
    found += sorted((ROOT / "tests" / "simulate" / "scripts").glob("*.py"))
    return [s for s in found if not s.name.startswith(MULTI_PROCESS)]


def _run(
    command: list[str], cwd: str, timeout: float
) -> tuple[subprocess.CompletedProcess[str], float]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
        )
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout.decode() if isinstance(expired.stdout, bytes) else ""
        done = subprocess.CompletedProcess(command, -9, out, "timed out")
    return done, time.perf_counter() - start


def _check(script: Path, tmp: str, simulate: bool, timeout: float) -> dict[str, Any]:
    report = Path(tmp) / ("sim.json" if simulate else "gpu.json")
    command = [sys.executable, "-m", "tensor_dap", "check", "--rules", "all"]
    command += ["--report", str(report), "--trace", str(Path(tmp) / f"{report.stem}.db")]
    command += ["--simulate", "cuda"] if simulate else []
    command += [*script_options(script), str(script)]
    done, seconds = _run(command, tmp, timeout)
    data = json.loads(report.read_text()) if report.exists() else {}
    findings = data.get("findings", [])
    return {
        "found": sorted((f["rule"], f["line"]) for f in findings),
        "messages": {f"{f['rule']}:{f['line']}": f["message"] for f in findings},
        "returncode": done.returncode,
        "exit": data.get("exit", {}),
        "stdout": done.stdout,
        "stderr_tail": done.stderr[-3000:],
        "seconds": seconds,
    }


def compare(script: Path, timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        plain, plain_s = _run([sys.executable, str(script)], tmp, timeout)
        gpu = _check(script, tmp, simulate=False, timeout=timeout)
        sim = _check(script, tmp, simulate=True, timeout=timeout)
    wanted = expected(script)
    return {
        "script": str(script.relative_to(ROOT)),
        "expected": wanted,
        "plain": {
            "returncode": plain.returncode,
            "stdout": plain.stdout,
            "seconds": plain_s,
            "stderr_tail": plain.stderr[-3000:],
        },
        "gpu": gpu,
        "sim": sim,
        "markers": sorted(set(gpu["found"])) == wanted,
        "sim_same": sim["found"] == gpu["found"],
        "messages_same": sim["messages"] == gpu["messages"],
        "same": plain.stdout == gpu["stdout"]
        and (plain.returncode == 0) == (gpu["exit"].get("status") == "ok"),
        "ratio": gpu["seconds"] / plain_s if plain_s else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-j", "--jobs", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    parser.add_argument("--json", help="write every run's details to this file")
    options = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: this compares a real GPU with the simulation")
    python = sys.version.split()[0]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, Python {python}")
    found = scripts()
    with ThreadPoolExecutor(options.jobs) as pool:
        pending = [pool.submit(compare, script, options.timeout) for script in found]
        # each script as it ends (stderr): a run cut short by a time limit keeps what had ended
        for number, done in enumerate(as_completed(pending), start=1):
            r = done.result()
            flags = ", ".join(k for k in ("markers", "sim_same", "messages_same", "same") if r[k])
            print(f"[{number}/{len(found)}] {r['script']}: {flags}", file=sys.stderr, flush=True)
    results = [future.result() for future in pending]
    print(f"{'script':44s} {'markers':>7} {'sim':>5} {'msgs':>5} {'same':>5} {'ratio':>6}")
    for r in results:
        flags = [r["markers"], r["sim_same"], r["messages_same"], r["same"]]
        cells = " ".join(f"{'yes' if f else 'NO':>5}" for f in flags)
        print(f"{r['script']:44s} {cells} {r['ratio']:6.2f}")
        if not r["markers"]:
            print(f"    expected {r['expected']}, GPU found {r['gpu']['found']}")
        if not r["sim_same"]:
            print(f"    simulation found {r['sim']['found']}")
        if not r["messages_same"]:
            for key, message in r["gpu"]["messages"].items():
                if r["sim"]["messages"].get(key) != message:
                    print(
                        f"    GPU {key}: {message}\n    sim {key}: {r['sim']['messages'].get(key)}"
                    )
        if not r["same"]:
            print(f"    plain exit {r['plain']['returncode']}, check exit {r['gpu']['returncode']}")
            print(f"    plain stderr: {r['plain']['stderr_tail'][-400:]!r}")
            print(f"    check stderr: {r['gpu']['stderr_tail'][-400:]!r}")
    counts = [sum(r[k] for r in results) for k in ("markers", "sim_same", "messages_same", "same")]
    print(
        f"{len(results)} scripts: markers {counts[0]}, simulation's findings {counts[1]}, "
        f"its messages {counts[2]}, plain's output and exit {counts[3]}"
    )
    if options.json:
        Path(options.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
