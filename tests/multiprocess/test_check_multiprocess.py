"""``tensor-dap check`` on programs of several processes, end to end: torchrun ranks (DDP on
gloo), DataLoader workers (fork and spawn), a rank killed mid-run. One merged report names the
rank or worker, file and line; the trace store holds rows of every process and stays sound;
the program's own output is what it is without tensor-dap."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, SIMULATE_CUDA
from tests.multiprocess.helpers import (
    PYTHON,
    TORCHRUN,
    check,
    free_port,
    pids_running,
    process_markers,
    run_group,
    store_rows,
)

DDP = SAMPLES / "ddp_rank_mismatch.py"
LOADER = SAMPLES / "dataloader_worker_collate.py"


def _rank_lines(text: str) -> list[str]:
    """Each rank's result line; ranks share one stdout, so two lines may run together."""
    return sorted(re.findall(r"rank \d+: running loss [^\]]*\]", text))


def _line_of(script: Path, text: str) -> int:
    lines = script.read_text().splitlines()
    return next(number for number, line in enumerate(lines, start=1) if text in line)


def _assert_store_sound(db: Path) -> None:
    assert store_rows(db, "PRAGMA integrity_check") == [("ok",)]
    assert len(store_rows(db, "SELECT run_id FROM runs")) == 1  # one begin_run, in the parent


def test_torchrun_ddp_reports_the_rank_that_hit_it(tmp_path: Path) -> None:
    [(rule, line, where)] = process_markers(DDP)
    assert where == "rank 1"
    # the sample is CUDA code: without GPUs, each rank simulates its own (rank 1: cuda:1)
    torchrun = [TORCHRUN, "--standalone", "--nproc_per_node", "2", str(DDP)]
    run = check(tmp_path, command=torchrun, extra=SIMULATE_CUDA)
    assert run.returncode == 1, run.stderr[-3000:]
    [finding] = run.findings
    assert (finding["rule"], finding["path"], finding["line"]) == (rule, str(DDP), line)
    assert finding["process"]["rank"] == 1 and finding["process"]["local_rank"] == 1
    assert finding["message"].startswith("`running + batch_loss`: running is on cpu")
    assert "batch_loss is on cuda:1" in finding["message"]
    # the merged summary: one line, labelled with the rank, with how often it fired
    summary = run.stderr.split("tensor-dap: 1 finding(s)")[1]
    expected = f"ddp_rank_mismatch.py:{line} device-mismatch [rank 1]  `running + batch_loss`"
    assert expected in summary
    assert "(×4)" in summary
    labels = {p["label"]: p for p in run.report["processes"]}
    assert labels["rank 0"]["ended"] and labels["rank 1"]["ended"]
    exit_ok = {"status": "ok", "code": 0, "exception": None}
    assert run.report["exit"] == exit_ok, run.stderr[-4000:]
    # the trace store: one run, rows from both ranks, the finding under rank 1
    db = tmp_path / "trace.db"
    _assert_store_sound(db)
    [(run_id,)] = store_rows(db, "SELECT run_id FROM runs")
    processes = {p for (p,) in store_rows(db, "SELECT DISTINCT process FROM observations")}
    assert {"rank 0", "rank 1"} <= processes
    rows = store_rows(db, "SELECT DISTINCT last_run_id FROM observations")
    assert rows == [(run_id,)]
    assert store_rows(db, "SELECT process, rule, line FROM findings") == [("rank 1", rule, line)]
    # each rank's rows add up: 4 steps, 4 batches seen by each, none lost to the other writer
    hits = dict(store_rows(db, "SELECT process, hits FROM observations WHERE name = 'x'"))
    assert hits == {"rank 0": 4, "rank 1": 4}
    moved = _line_of(DDP, "batch_loss = batch_loss.to(device)")
    rows = store_rows(db, f"SELECT process, device FROM observations WHERE line = {moved}")
    assert rows == [("rank 1", "cuda:1")]  # what differs between ranks, for the editor


def test_python_m_torch_distributed_run_results_unchanged_and_rank_limits(tmp_path: Path) -> None:
    def launcher() -> list[str]:
        return [
            PYTHON, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", str(DDP),
        ]  # fmt: skip

    plain = run_group(launcher(), tmp_path)
    if plain.returncode != 0 and "SIGABRT" in plain.stderr:
        # the baseline, without tensor-dap: gloo's teardown on a loaded 2-core machine now and
        # then aborts a rank ("terminate called without an active exception"); run it again
        plain = run_group(launcher(), tmp_path)
    assert plain.returncode == 0, plain.stderr[-3000:]
    # device-mismatch limited to ranks 0 and 2: rank 1's mismatch is not looked for
    run = check(
        tmp_path,
        command=launcher(),
        rules="default,device-mismatch@rank=0+2",
        extra=SIMULATE_CUDA,
    )
    assert run.findings == [], run.stderr[-3000:]
    assert run.returncode == 0
    assert {p["label"] for p in run.report["processes"]} >= {"rank 0", "rank 1"}
    # same losses and weights on both ranks: the agent changed nothing DDP computed
    assert _rank_lines(run.stdout) == _rank_lines(plain.stdout)
    assert len(_rank_lines(run.stdout)) == 2


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_dataloader_workers_report_as_themselves(tmp_path: Path, start_method: str) -> None:
    [(rule, line, where)] = process_markers(LOADER)
    assert where == "worker"
    run = check(tmp_path, str(LOADER), "--start-method", start_method)
    assert run.returncode == 1, run.stderr[-3000:]
    found = sorted((f["rule"], f["line"], f["process"]["worker"]) for f in run.findings)
    assert found == [(rule, line, 0), (rule, line, 1)]
    assert {f["path"] for f in run.findings} == {str(LOADER)}
    assert f"dataloader_worker_collate.py:{line} broadcast [worker 0; worker 1]" in run.stderr
    plain = run_group([PYTHON, str(LOADER), "--start-method", start_method], tmp_path)
    if plain.returncode == 0 and not plain.stdout:  # (the reference run, without tensor-dap,
        # once exited 0 having printed nothing in a fresh-clone CI, 2026-12-06, cause not
        # found: the reference is taken again; the watched run's output is never retried)
        plain = run_group([PYTHON, str(LOADER), "--start-method", start_method], tmp_path)
    # same loss: the workers computed the same batches
    assert run.stdout == plain.stdout, (run.stderr[-3000:], plain.returncode, plain.stderr[-3000:])
    db = tmp_path / "trace.db"
    _assert_store_sound(db)
    processes = {p for (p,) in store_rows(db, "SELECT DISTINCT process FROM observations")}
    assert processes == {"main", "worker 0", "worker 1"}
    stored = store_rows(db, "SELECT process FROM findings ORDER BY process")
    assert stored == [("worker 0",), ("worker 1",)]


@pytest.mark.parametrize(("rules", "expected"), [("broadcast@rank=1", 0), ("broadcast@rank=0", 2)])
def test_rule_limited_to_ranks(tmp_path: Path, rules: str, expected: int) -> None:
    """Outside torchrun every process counts as rank 0."""
    run = check(tmp_path, str(LOADER), rules=rules)
    assert len(run.findings) == expected, run.stderr[-3000:]
    assert run.returncode == (1 if expected else 0)
    assert run.report["rules"] == [rules]


def test_a_killed_rank_is_reported_and_nothing_is_left_running(tmp_path: Path) -> None:
    script = tmp_path / "dies.py"
    script.write_text(
        textwrap.dedent(
            """\
            import os
            import signal
            import time

            import torch

            rank = int(os.environ["RANK"])
            y = torch.ones(3) - torch.ones(3, 1)
            if rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(1)
            """
        )
    )
    run = check(tmp_path, command=[TORCHRUN, "--standalone", "--nproc_per_node", "2", str(script)])
    assert run.returncode == 1
    ranks = sorted(f["process"]["rank"] for f in run.findings)
    assert 1 in ranks  # what rank 1 found before it died
    assert run.report["exit"]["code"] != 0
    dead = [p for p in run.report["processes"] if p["label"] == "rank 1"]
    assert dead and not dead[0]["ended"]
    assert "(rank 1) ended without saying so (killed or crashed?)" in run.stderr
    assert pids_running(str(script)) == []


def test_a_users_sitecustomize_still_runs(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITE_RAN = True\n")
    script = tmp_path / "child.py"
    script.write_text(
        "import builtins\nimport torch\n"
        "print('user sitecustomize ran:', getattr(builtins, 'USER_SITE_RAN', False))\n"
        "y = torch.ones(3) - torch.ones(3, 1)\n"
    )
    run = check(tmp_path, command=[PYTHON, str(script)], env={"PYTHONPATH": str(site)})
    assert "user sitecustomize ran: True" in run.stdout
    [finding] = run.findings
    assert (finding["rule"], finding["line"]) == ("broadcast", 4)
    assert finding["process"]["child"] is True
    assert f"child.py:4 broadcast [pid {finding['process']['pid']}]" in run.stderr


def test_command_usage_errors(tmp_path: Path) -> None:
    cli = [PYTHON, "-m", "tensor_dap", "check"]
    missing = run_group([*cli, "--"], tmp_path)
    assert missing.returncode == 2 and "a COMMAND is required after --" in missing.stderr
    unknown = run_group([*cli, "--", "no-such-command-tensor-dap"], tmp_path)
    assert unknown.returncode == 2
    assert "cannot run no-such-command-tensor-dap: No such file or directory" in unknown.stderr
    # a `--` after the script is the script's, as with python
    script = tmp_path / "args.py"
    script.write_text("import sys\nprint(sys.argv[1:])\n")
    done = run_group([*cli, str(script), "--", "x"], tmp_path)
    assert done.returncode == 0 and "['--', 'x']" in done.stdout


def test_the_commands_exit_status_is_reported(tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint('out')\nsys.exit(3)\n")
    run = check(tmp_path, command=[PYTHON, str(script)])
    assert run.returncode == 3 and run.stdout == "out\n"  # the command's own
    assert run.report["exit"] == {"status": "exit", "code": 3, "exception": None}
    assert run.findings == [] and "tensor-dap: no findings" in run.stderr
