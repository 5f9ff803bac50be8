"""The checks each rule contributes: one module per rule, named by its entry in the rule
catalogue (:mod:`tensor_dap.catalog`, which holds the ids, titles and traits and imports no
torch). A rule module defines ``RULE = catalog.rule(ID)`` and some of these hooks, all optional
(typed in :mod:`tensor_dap.agent.rules.hooks`):

- ``applies(op) -> bool`` and ``before(op, args, kwargs, state) -> Report | None``: checked before
  a torch function whose :class:`~tensor_dap.agent.op_kinds.OpInfo` it ``applies`` to runs;
- ``applies_before(op) -> bool``: when defined, decides for ``before`` instead of ``applies``
  (``nan-inf`` reads every op's result ``after``, but only backward calls ``before``: decided
  once per function when it is planned, nothing per op);
- ``after(op, args, kwargs, out, state) -> Report | None``: checked after it returned;
- ``observe(op, args, out, caller, state)``: sees a sample of ops (the first runs of each call
  site, then one in 64) to learn about the program cheaply;
- ``install(state) -> list[handle]``: hooks outside the op stream (optimizer steps...), removed
  when the watch ends;
- ``SCREEN``: a promise about ``before`` that lets the engine's C path skip calling it:
  :data:`RANKS_DIFFER` says it returns ``None`` unless two tensors among the positional
  arguments have different non-zero ranks; an ``int`` says it returns ``None`` unless the op's
  ``inplace`` flag is set, as a keyword or at that position (``F.dropout(x, p, training,
  True)``). ``screen(op)``, where a module has it, gives the screen per op. (The Python path
  calls ``before`` regardless.)

Rules read what an op saw and answer with a :class:`Report` or ``None``; they never touch data
they were not given, and a rule that raises is switched off by the engine.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Optional

from tensor_dap import catalog
from tensor_dap.catalog import RULE_IDS, Rule, default_rule_ids

__all__ = [
    "RANKS_DIFFER",
    "RULE_IDS",
    "Report",
    "Rule",
    "UnknownRuleError",
    "all_rules",
    "default_rule_ids",
    "parse_rules",
    "rule_modules",
]


@dataclass
class Report:
    """What a rule found; the engine adds the user's line, names and provenance.

    ``message`` receives one :class:`~tensor_dap.agent.describe.Described` per tensor in
    ``tensors`` (same order) and the text of the expression running on the user's line, and
    returns the finding's text.
    """

    tensors: list[Any]
    message: Callable[[list[Any], str], str]
    #: the user's frame to report at, when the rule knows better than the op's caller
    frame: Any = None
    #: ``(path, line)`` to report at when that line is no longer running (the forward line of a
    #: graph node whose backward misbehaved); ``frame`` is then the live frame a debugger stops in
    at: Optional[tuple[str, int]] = None
    #: the tensors are the op's operands, in order (so the expression's text can name them)
    operands: bool = True
    #: the last tensor is the op's result (named as the line names it: ``dinv`` of ``dinv =
    #: deg.pow(-0.5)``, else the expression), the others its operands
    result: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


#: ``SCREEN`` value: ``before`` only reports when positional tensor operands' ranks differ
RANKS_DIFFER = "ranks-differ"

_LOADED: list[ModuleType] = []


def rule_modules() -> list[ModuleType]:
    """The rule modules, in the order their checkboxes are shown (imported once: every watch
    asks, and seven ``import_module`` calls cost about 50 µs)."""
    if not _LOADED:
        _LOADED.extend(importlib.import_module(f"{__name__}.{r.module}") for r in catalog.RULES)
    return list(_LOADED)


def all_rules() -> list[Rule]:
    return list(catalog.RULES)


class UnknownRuleError(ValueError):
    pass


def parse_rules(spec: Optional[str]) -> list[str]:
    """``"default"``, ``"all"``, ``"none"`` or a comma list of rule ids (may mix ``default``).

    An entry may be limited to some ranks of a distributed run, ``device-mismatch@rank=1`` or
    ``default@rank=0+2`` (see :mod:`tensor_dap.agent.ranks`); the result then holds the rule as
    ``"device-mismatch@rank=1"``. A later entry for a rule replaces an earlier one, so
    ``default,nan-inf@rank=1`` means the default rules everywhere and ``nan-inf`` on rank 1.
    """
    from tensor_dap.agent.ranks import BadRanksError, parse_ranks, split_scope

    if spec is None or spec.strip() == "":
        return default_rule_ids()
    chosen: dict[str, str] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        part, ranks = split_scope(part)
        if ranks is not None:
            try:
                parse_ranks(ranks)
            except BadRanksError as error:
                raise UnknownRuleError(str(error)) from None
        if part == "default":
            names = default_rule_ids()
        elif part == "all":
            names = list(RULE_IDS)
        elif part == "none":
            names = []
        elif part in RULE_IDS:
            names = [part]
        else:
            known = ", ".join(RULE_IDS)
            raise UnknownRuleError(f"unknown rule {part!r}; known rules: {known} (or default, all)")
        for name in names:  # a later entry for a rule replaces the earlier one
            chosen[name] = name if ranks is None else f"{name}@rank={ranks}"
    return list(chosen.values())
