"""The run folder's per-process findings logs, and the environment that spreads the agent."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tensor_dap.agent.findings_log import FindingsLog, collect
from tensor_dap.agent.process import ROOT_ENV
from tensor_dap.agent.spread import BOOTSTRAP_DIR, CONFIG_ENV, ChildConfig, child_environment
from tensor_dap.findings import Finding


def _finding(line: int, **process: object) -> Finding:
    return Finding("broadcast", "/x/train.py", line, "`a - b`: ...", process=dict(process))


def test_findings_and_counts_come_back_per_process(tmp_path: Path) -> None:
    log = FindingsLog(str(tmp_path))
    log(_finding(3, pid=7, rank=1))
    log.end({("broadcast", "/x/train.py", 3): 5})
    collected = collect(str(tmp_path))
    assert [(f.line, f.process["rank"]) for f in collected.findings] == [(3, 1)]
    assert collected.times == [5]
    [record] = collected.processes
    assert record.ended and record.pid == os.getpid()


def test_rules_a_child_switched_off_come_back_with_its_tag(tmp_path: Path) -> None:
    """``check -- torchrun ...``: a rule failing in a rank fails the run's exit status too."""
    log = FindingsLog(str(tmp_path))
    log.end({}, {"nan-inf": "NotImplementedError: sparse"})
    assert collect(str(tmp_path)).failed == {
        "nan-inf": f"NotImplementedError: sparse [pid {os.getpid()}]"
    }


def test_a_process_that_died_mid_line_keeps_what_it_wrote(tmp_path: Path) -> None:
    path = tmp_path / "4242-abcd.jsonl"
    good = json.dumps({"finding": _finding(9, pid=4242, worker=0).to_json()})
    path.write_text(good + "\n" + '{"finding": {"rule": "broad')  # killed while writing
    (tmp_path / "notes.txt").write_text("not ours")
    collected = collect(str(tmp_path))
    assert [f.line for f in collected.findings] == [9]
    [record] = collected.processes
    assert record.pid == 4242 and not record.ended
    assert collect(str(tmp_path / "gone")).findings == []


def test_child_environment_prepends_the_bootstrap_once() -> None:
    config = ChildConfig(rules=["nan-inf@rank=1"], run_id=3, echo=True)
    env = child_environment(config, {"PYTHONPATH": "/mine"}, 99)
    assert env["PYTHONPATH"].split(os.pathsep) == [BOOTSTRAP_DIR, "/mine"]
    assert env[ROOT_ENV] == "99"
    again = child_environment(config, env, 99)
    assert again["PYTHONPATH"] == env["PYTHONPATH"]
    assert ChildConfig.from_env(again) == config
    assert ChildConfig.from_env({CONFIG_ENV: "{not json"}) is None
