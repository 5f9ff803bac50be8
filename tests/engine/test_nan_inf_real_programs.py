"""``nan-inf`` on real programs: NaN passed along inside list arguments, tensor types it cannot
read, and a rule that fails (any rule) showing in the summary, the report and the exit status."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).lstrip())
    return path


def test_a_failing_rule_shows_in_the_summary_the_report_and_the_exit_status(
    tmp_path: Path, check
) -> None:
    """A rule switched off mid-run means the run was not fully checked: never a silent 0."""
    script = write(
        tmp_path,
        "broken_rule.py",
        """
        import torch
        from tensor_dap.agent.rules import broadcast

        def broken(*args, **kwargs):
            raise ZeroDivisionError("bug in a rule\\nsecond line of a long message")

        broadcast.before = broken  # ops planned from now on call it
        print((torch.ones(4) - torch.ones(4, 1)).shape)
        """,
    )
    run = check(script, rules="broadcast")
    assert run.findings == []
    assert run.report["failed_rules"] == {"broadcast": "ZeroDivisionError: bug in a rule"}
    summary = run.stderr[run.stderr.index("tensor-dap: no findings") :]
    line = "tensor-dap: rule broadcast failed and was switched off: ZeroDivisionError: bug in a"
    assert f"{line} rule\n" in summary
    assert run.returncode == 1
