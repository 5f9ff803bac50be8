"""The one serialised form of a finding (tensor_dap.findings): what goes in comes back out, in
the findings log, the stop's text and the trace store alike, and a damaged record is refused
with a message that says what is wrong, never a KeyError or a guess."""

from __future__ import annotations

import json

import pytest

from tensor_dap.agent.suspend import TensorBreakpoint
from tensor_dap.findings import (
    Finding,
    MalformedFinding,
    Origin,
    TensorInfo,
    finding_in_stop,
    process_tag,
    stop_description,
    stop_text,
)


def _finding(**process: object) -> Finding:
    return Finding(
        "device-mismatch",
        "/x/train.py",
        17,
        "`a + b`: a is on cpu, b is on cuda:0.\nCreate a with device=b.device.",
        tensors=[
            TensorInfo("a", (6,), "torch.float32", "cpu", origin=Origin("/x/train.py", 3, "zeros")),
            TensorInfo("b", (2, 6), "torch.float32", "cuda:0", True, "AddBackward0"),
        ],
        process=dict(process),
    )


def test_a_finding_round_trips_through_json() -> None:
    finding = _finding(pid=7, rank=1, worker=0, child=True)
    assert Finding.from_json(json.loads(json.dumps(finding.to_json()))) == finding
    assert Finding.loads(finding.dumps()) == finding
    assert finding.to_json()["tensors"][0] == {
        "name": "a",
        "shape": [6],
        "dtype": "torch.float32",
        "device": "cpu",
        "requires_grad": False,
        "grad_fn": None,
        "origin": {"path": "/x/train.py", "line": 3, "op": "zeros"},
    }


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda d: d.pop("rule"), "without 'rule'"),
        (lambda d: d.update(line="17"), "'line' is '17', not an integer"),
        (lambda d: d.update(line=True), "'line' is True, not an integer"),
        (lambda d: d.update(message=None), "'message' is None, not a string"),
        (lambda d: d.update(tensors={"a": 1}), "'tensors' is {'a': 1}, not a list"),
        (lambda d: d.update(process=[1]), "'process' is [1], not an object"),
        (lambda d: d["tensors"][0].update(shape="6"), "'shape' is '6', not a list of integers"),
        (lambda d: d["tensors"][0].pop("device"), "without 'device'"),
        (lambda d: d["tensors"][0].update(origin={"path": "/x"}), "without 'line'"),
        (lambda d: d["tensors"].append(3), "a tensor is int, not a JSON object"),
    ],
)
def test_a_damaged_record_is_refused_with_what_is_wrong(change, says: str) -> None:  # noqa: ANN001
    data = _finding().to_json()
    change(data)
    with pytest.raises(MalformedFinding, match=says.replace("[", r"\[").replace("(", r"\(")):
        Finding.from_json(data)


def test_text_that_is_not_a_finding_is_refused() -> None:
    with pytest.raises(MalformedFinding, match="not a JSON object"):
        Finding.from_json([1, 2])
    with pytest.raises(MalformedFinding, match="not JSON"):
        Finding.loads('{"rule": "broad')


def test_the_stop_carries_the_finding_under_what_a_person_reads() -> None:
    finding = _finding(pid=42, rank=1)
    text = stop_text(finding)
    assert text.startswith("Paused on device-mismatch: [rank 1] `a + b`: a is on cpu")
    assert stop_description(finding) == f"Paused on device-mismatch: [rank 1] {finding.message}"
    assert finding_in_stop(text) == finding
    assert finding_in_stop(str(TensorBreakpoint(finding))) == finding
    # the __exception__ variable debugpy shows while stopped: no JSON in it
    assert repr(TensorBreakpoint(finding)) == f"TensorBreakpoint({stop_description(finding)!r})"


def test_other_exceptions_are_not_findings_and_a_damaged_stop_says_so() -> None:
    assert finding_in_stop("division by zero") is None
    assert finding_in_stop(None) is None
    text = stop_text(_finding())
    with pytest.raises(MalformedFinding):
        finding_in_stop(text[:-5])


def test_process_tags() -> None:
    assert process_tag({"pid": 1}) == ""
    assert process_tag({"pid": 1, "rank": 1, "worker": 0}) == "rank 1, worker 0"
    assert process_tag({"pid": 1, "rank": 2, "worker_id": 3}, separator=" ") == "rank 2 worker 3"
    assert process_tag({"pid": 42, "child": True}) == "pid 42"
    assert process_tag({"label": "rank 0", "rank": 0}) == "rank 0"
    assert process_tag("worker 1") == "worker 1"
    assert process_tag(None) == ""
    assert _finding(rank=3).tagged_message().startswith("[rank 3] `a + b`")
    assert _finding(pid=9).tagged_message().startswith("`a + b`")
