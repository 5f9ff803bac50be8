"""The hooks a rule module may define, as typed protocols, and what they get from the engine.

A rule is a module (see :mod:`tensor_dap.agent.rules`); the engine plans each torch function
once, asking ``applies``/``applies_before``, then per op calls ``before`` and ``after``, a
sample of ops ``observe``, and at watch start ``install``. ``state`` is the running
:class:`~tensor_dap.agent.engine.Watch`, seen through :class:`RuleState`: what a rule may read
and the two calls it may make. Every rule module is checked against these signatures by
``tests/unit/test_catalog.py``.
"""

from __future__ import annotations

from types import FrameType
from typing import Any, Optional, Protocol

from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.provenance import ProvenanceRegistry
from tensor_dap.agent.rules import Report
from tensor_dap.catalog import Rule

#: an op's positional and keyword arguments, as the hooks get them (scanned one level deep)
Args = tuple[Any, ...]
Kwargs = Optional[dict[str, Any]]


class RuleState(Protocol):
    """The engine as a rule sees it."""

    #: rule ids switched on (the debugger may change them while the program runs)
    enabled: set[str]
    #: rules switched off because they raised: id -> reason
    failed: dict[str, str]
    #: per-rule options, e.g. ``{"leaves-device": {"scalars": True}}``
    options: dict[str, dict[str, Any]]
    #: scratch space the rules keep between ops, keyed by ``"<rule id>.<what>"``
    rule_state: dict[str, Any]
    #: where each tensor was created
    provenance: ProvenanceRegistry

    def _emit(self, rule_id: str, report: Report, info: OpInfo, caller: FrameType) -> None:
        """Report a finding from outside the op stream (an ``install`` hook)."""

    def _rule_failed(self, rule_id: str, error: Optional[BaseException] = None) -> None:
        """Switch the rule off after it raised outside the op stream."""


class Applies(Protocol):
    def __call__(self, op: OpInfo) -> bool: ...


class Before(Protocol):
    def __call__(
        self,
        op: OpInfo,
        args: Args,
        kwargs: Kwargs,
        caller: FrameType,
        state: RuleState,
    ) -> Optional[Report]: ...


class After(Protocol):
    def __call__(
        self,
        op: OpInfo,
        args: Args,
        kwargs: Kwargs,
        out: Any,
        caller: FrameType,
        state: RuleState,
    ) -> Optional[Report]: ...


class Observe(Protocol):
    def __call__(
        self, op: OpInfo, args: Args, out: Any, caller: FrameType, state: RuleState
    ) -> None: ...


class Raised(Protocol):
    def __call__(
        self,
        op: OpInfo,
        args: Args,
        kwargs: Kwargs,
        error: BaseException,
        caller: FrameType,
        state: RuleState,
    ) -> Optional[Report]:
        """The op raised ``error``: called before the stack unwinds (the error goes on)."""
        ...


class Install(Protocol):
    def __call__(self, state: RuleState) -> list[Any]:
        """Hooks outside the op stream; each returned handle has ``remove()``."""
        ...


#: hook name -> its protocol (a rule module defines any of them)
HOOKS: dict[str, type] = {
    "applies": Applies,
    "applies_before": Applies,
    "before": Before,
    "after": After,
    "observe": Observe,
    "install": Install,
    "raised": Raised,
}


class RuleModule(Protocol):
    """What every rule module defines; the hooks in :data:`HOOKS` are optional."""

    RULE: Rule
