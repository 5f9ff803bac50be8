"""Rule entries limited to ranks: parsing ``RULE@rank=LIST`` and choosing a process's rules."""

from __future__ import annotations

import pytest

from tensor_dap.agent.ranks import BadRanksError, parse_ranks, rules_for_rank
from tensor_dap.agent.rules import UnknownRuleError, parse_rules


def test_rank_lists() -> None:
    assert parse_ranks("1") == {1}
    assert parse_ranks("0+2-4") == {0, 2, 3, 4}
    for bad in ("", "x", "3-1", "-1", "1+"):
        with pytest.raises(BadRanksError):
            parse_ranks(bad)


def test_parse_rules_keeps_scopes_and_later_entries_win() -> None:
    rules = parse_rules("default,device-mismatch@rank=1")
    assert "device-mismatch@rank=1" in rules and "device-mismatch" not in rules
    assert len(rules) == len(parse_rules("default"))
    assert parse_rules("broadcast@rank=0+2,grad-lost") == ["broadcast@rank=0+2", "grad-lost"]
    with pytest.raises(UnknownRuleError, match="bad rank list"):
        parse_rules("broadcast@rank=one")
    with pytest.raises(UnknownRuleError, match="unknown rule"):
        parse_rules("nope@rank=1")


def test_each_process_keeps_the_rules_of_its_rank() -> None:
    entries = ["grad-lost", "device-mismatch@rank=1", "nan-inf@rank=0-1"]
    assert rules_for_rank(entries, 1) == ["grad-lost", "device-mismatch", "nan-inf"]
    assert rules_for_rank(entries, 2) == ["grad-lost"]
    assert rules_for_rank(entries, None) == ["grad-lost", "nan-inf"]  # no rank: rank 0
