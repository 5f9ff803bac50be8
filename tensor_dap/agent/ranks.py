"""Rules limited to some ranks of a distributed run: ``device-mismatch@rank=1``.

A rule entry in ``--rules`` or the launch's ``tensorBreakpoints`` may end in ``@rank=LIST``,
LIST being ranks joined by ``+`` with ``A-B`` ranges: ``nan-inf@rank=0+2``,
``default@rank=1-3``. Every process receives the same entries and keeps those that name its own
rank (:func:`rules_for_rank`), so a rank-limited rule costs the other ranks nothing. A process
without a rank (no ``RANK`` in its environment, ``torch.distributed`` not initialised) counts as
rank 0, the rank a single-process run would have.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

SCOPE = "@rank="


class BadRanksError(ValueError):
    pass


def split_scope(entry: str) -> tuple[str, Optional[str]]:
    """``"device-mismatch@rank=1"`` -> ``("device-mismatch", "1")``; no scope: ``(entry, None)``."""
    rule, marker, ranks = entry.partition(SCOPE)
    if not marker:
        return entry.strip(), None
    return rule.strip(), ranks.strip()


def parse_ranks(text: str) -> frozenset[int]:
    """``"1"``, ``"0+2"``, ``"1-3"``, ``"0+4-5"`` -> the set of ranks; raises BadRanksError."""
    ranks: set[int] = set()
    for part in text.split("+"):
        low, dash, high = part.strip().partition("-")
        try:
            first = int(low)
            last = int(high) if dash else first
        except ValueError:
            raise BadRanksError(
                f"bad rank list {text!r}: use ranks joined by '+', ranges as A-B (e.g. 0+2-3)"
            ) from None
        if first < 0 or last < first:
            raise BadRanksError(f"bad rank range {part.strip()!r} in {text!r}")
        ranks.update(range(first, last + 1))
    return frozenset(ranks)


def rules_for_rank(entries: Iterable[str], rank: Optional[int]) -> list[str]:
    """The plain rule ids of ``entries`` that apply in a process of ``rank`` (None: rank 0)."""
    mine = 0 if rank is None else rank
    chosen: list[str] = []
    for entry in entries:
        rule, ranks = split_scope(entry)
        if ranks is not None:
            try:
                if mine not in parse_ranks(ranks):
                    continue
            except BadRanksError:
                continue
        if rule not in chosen:
            chosen.append(rule)
    return chosen


def ranks_spec(value: object) -> str:
    """A launch's ``tensorRanks`` (``[1, 3]``, ``1`` or ``"0+2-3"``) as a checked LIST string."""
    if isinstance(value, bool):
        raise BadRanksError(f"bad tensorRanks {value!r}: give a list of ranks such as [1]")
    if isinstance(value, int):
        value = [value]
    if isinstance(value, list):
        if not value or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise BadRanksError(f"bad tensorRanks {value!r}: give a list of ranks such as [1]")
        text = "+".join(str(v) for v in value)
    else:
        text = str(value)
    parse_ranks(text)
    return text


def scoped(rules: Iterable[str], ranks: Optional[str]) -> list[str]:
    """``rules`` limited to ``ranks`` (a LIST string), unless an entry names its own ranks."""
    if not ranks:
        return list(rules)
    return [rule if SCOPE in rule else f"{rule}{SCOPE}{ranks}" for rule in rules]
