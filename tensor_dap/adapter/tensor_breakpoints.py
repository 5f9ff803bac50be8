"""Tensor breakpoints on the wire: the rules as exception breakpoint checkboxes, and the stops
on their findings named after their rule.

The rules join debugpy's own filters in ``initialize``'s ``exceptionBreakpointFilters``; the
ticked ones are taken out of ``setExceptionBreakpoints`` (debugpy does not know them), sent to
the agents over the channel, and put back, verified, in the response. A launch or attach may
name them too (``tensorBreakpoints``, ``tensorRanks``; ``tensorMemoryLimit`` turns on
``memory-limit`` with its limit). A stop on a finding reaches the proxy as
debugpy's exception stop on :class:`~tensor_dap.agent.suspend.TensorBreakpoint`, whose text
carries the finding (:func:`tensor_dap.findings.stop_text`): the stop and its
``exceptionInfo`` are rewritten from the decoded finding.

Which rules are on, and what the client's checkboxes show, must agree from the start. A client
that sends ``setExceptionBreakpoints`` with no tensor filter while the launch names
``tensorBreakpoints`` (a DAP client of its own, an editor's config) keeps the launch's rules on
until it ticks one. VS Code shows a checkbox ticked only when it sends it ticked: it creates each
checkbox from the filter's ``default``, or reuses the one stored from an earlier session with
*its* tick. So VS Code's extension, which knows the resolved configuration before it starts the
adapter, passes the launch's rules (``tensor-dap adapter --rules R1,R2``): those filters are
advertised ``default: true``, and from then on what the client sends is what is on, from its
first ``setExceptionBreakpoints`` (before ``configurationDone``: before the program runs).
The one case where the launch and the view differ: a checkbox the user unticked in an earlier
session stays unticked (VS Code keeps it), so that rule is off, as the view shows; the debug
console says so, and ticking it turns it on.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from tensor_dap.adapter.agent_channel import AgentChannel
from tensor_dap.adapter.proxy import Message, Refusal
from tensor_dap.agent.ranks import BadRanksError, ranks_spec
from tensor_dap.agent.rules import RULE_IDS, UnknownRuleError, all_rules, parse_rules
from tensor_dap.findings import Finding, MalformedFinding, finding_in_stop, stop_description
from tensor_dap.sizes import BadSize, parse_size

log = logging.getLogger("tensor_dap.adapter")

_BREAKPOINT_CLASS = "TensorBreakpoint"
#: the rule a launch's ``tensorMemoryLimit`` turns on
MEMORY_LIMIT = "memory-limit"
_BREAKPOINT_MODULE = "tensor_dap.agent.suspend"


class TensorBreakpoints:
    """The enabled rules of one session, and the handlers that show them on the wire."""

    def __init__(
        self,
        channel: AgentChannel,
        tell_client: Callable[[str], None],
        ticked: Optional[str] = None,
    ) -> None:
        """``ticked``: the rules the coming launch turns on, as the client told the adapter
        (``--rules``; None: not told)."""
        self.channel = channel
        self.rules: list[str] = []
        self._tell_client = tell_client
        #: seq of a setExceptionBreakpoints request -> every filter it named, in order
        self._pending_filters: dict[int, list[str]] = {}
        #: the filters advertised ticked (``default: true``)
        self._ticked = _rule_ids(ticked)
        #: launch's tensorBreakpoints stay on until the client itself ticks a tensor filter;
        #: a client that told the adapter the launch's rules shows them, and decides at once
        self._client_knows_tensor_filters = self._ticked is not None
        self._first_filters = True
        #: bytes of the launch's ``tensorMemoryLimit`` (the ``memory-limit`` rule's), or None
        self.memory_limit: Optional[int] = None

    # -- requests ---------------------------------------------------------------------------
    def take(self, request: Message) -> None:
        """Apply a launch's or attach's ``tensorRanks`` and ``tensorBreakpoints`` (taken out of
        its arguments); :class:`Refusal` for an unknown rule or bad ranks."""
        arguments = request["arguments"]
        limit = arguments.pop("tensorMemoryLimit", None)
        if limit is not None:  # a limit turns its rule on (its checkbox may turn it off)
            try:
                self.memory_limit = parse_size(limit)
            except BadSize as error:
                raise Refusal(f"tensorMemoryLimit: {error}") from error
            if not any(_rule_id(entry) == MEMORY_LIMIT for entry in self.rules):
                self.rules = [*self.rules, MEMORY_LIMIT]
                self.channel.set_rules(self.rules)
        try:
            ranks = arguments.pop("tensorRanks", None)
            if ranks is not None:  # every tensor breakpoint only in these ranks of the job
                self.channel.ranks = ranks_spec(ranks)
                self.channel.set_rules(self.rules)
            wanted = arguments.pop("tensorBreakpoints", None)
            if wanted is None:
                return
            spec = ",".join(wanted) if isinstance(wanted, list) else str(wanted)
            self.rules = parse_rules(spec) if spec.strip() else []  # [] means none, not default
            if limit is not None and MEMORY_LIMIT not in map(_rule_id, self.rules):
                self.rules.append(MEMORY_LIMIT)
        except (UnknownRuleError, BadRanksError) as error:
            raise Refusal(str(error)) from error
        self.channel.set_rules(self.rules)

    def filters_request(self, message: Message) -> None:
        """``setExceptionBreakpoints``: keep the tensor filters, pass debugpy the others."""
        arguments = message.setdefault("arguments", {})
        filters = list(arguments.get("filters") or [])
        options = list(arguments.get("filterOptions") or [])
        ours = [f for f in filters if f in RULE_IDS]
        ours += [o.get("filterId") for o in options if o.get("filterId") in RULE_IDS]
        if ours:
            self._client_knows_tensor_filters = True
        if self._client_knows_tensor_filters:
            asked = {_rule_id(entry): entry for entry in self.rules}  # rank scopes kept
            if self._first_filters:
                self._say_unticked([r for r in asked if r not in ours])
            self.rules = [asked.get(r, r) for r in RULE_IDS if r in ours]
            self.channel.set_rules(self.rules)
        self._first_filters = False
        arguments["filters"] = [f for f in filters if f not in RULE_IDS]
        arguments["filterOptions"] = [o for o in options if o.get("filterId") not in RULE_IDS]
        self._pending_filters[message["seq"]] = filters + [o.get("filterId") for o in options]

    # -- what debugpy sends -----------------------------------------------------------------
    def advertise(self, message: Message) -> None:
        """``initialize``'s response: a checkbox per rule after debugpy's own."""
        body = message.setdefault("body", {}) or {}
        message["body"] = body
        filters = list(body.get("exceptionBreakpointFilters") or [])
        filters += [
            {
                "filter": rule.id,
                "label": rule.title,
                "description": rule.description,
                "default": rule.id in (self._ticked or ()),
            }
            for rule in all_rules()
        ]
        body["exceptionBreakpointFilters"] = filters

    def _say_unticked(self, rules: list[str]) -> None:
        """The launch names ``rules`` but the client's first request leaves them off: the
        residual case (a checkbox unticked in an earlier session, which VS Code keeps)."""
        for rule in rules:
            self._tell_client(
                f"tensor-dap: the launch configuration turns on {rule}, but its checkbox in "
                "BREAKPOINTS is unticked (kept from an earlier session): it is off. Tick it to "
                "turn it on."
            )

    def filters_response(self, message: Message) -> None:
        """``setExceptionBreakpoints``' response: a verified breakpoint per tensor filter, in
        the order the client named them."""
        filters = self._pending_filters.pop(message.get("request_seq", -1), None)
        if filters is None or not message.get("success"):
            return
        body = message.setdefault("body", {}) or {}
        theirs = iter(body.get("breakpoints") or [])
        merged = []
        for name in filters:
            merged.append(
                {"verified": True} if name in RULE_IDS else next(theirs, {"verified": True})
            )
        body["breakpoints"] = merged
        message["body"] = body

    def stopped(self, message: Message) -> None:
        """A stop on a finding: ``text`` the rule, ``description`` what it found."""
        body = message.get("body") or {}
        if body.get("reason") != "exception" or not _names_breakpoint(body.get("text")):
            return
        finding = self._finding(body.get("description"), tell=True)
        if finding is not None:
            body["description"] = stop_description(finding)
            body["text"] = finding.rule

    def exception_info(self, message: Message) -> None:
        """``exceptionInfo`` of a stop on a finding: named after the rule, the finding's message,
        and the user's stack without the internal exception."""
        body = message.get("body") or {}
        if not _names_breakpoint(body.get("exceptionId")):
            return
        finding = self._finding(body.get("description"))
        if finding is None:
            return
        rule, text = finding.rule, finding.tagged_message()
        body["exceptionId"] = rule
        body["description"] = text
        body["breakMode"] = "always"
        details = body.get("details") or {}
        details.update({"message": text, "typeName": rule, "fullTypeName": f"tensor-dap.{rule}"})
        stack = details.get("stackTrace")
        if isinstance(stack, str):
            # debugpy ends the trace with "tensor_dap.agent.suspend.TensorBreakpoint: <the
            # stop's text>": the message again, under an internal name; the widget shows it above
            cut = stack.find(f"{_BREAKPOINT_MODULE}.{_BREAKPOINT_CLASS}")
            if cut > 0:
                details["stackTrace"] = stack[:cut]
        body["details"] = details

    def _finding(self, text: Any, tell: bool = False) -> Optional[Finding]:
        """The finding a stop's text carries, when it names a rule of ours. A damaged one
        leaves the stop as debugpy sent it (and says so): the session goes on."""
        try:
            finding = finding_in_stop(text)
        except MalformedFinding as error:
            log.warning("tensor-dap: a tensor breakpoint's finding is unreadable: %s", error)
            if tell:
                self._tell_client(f"tensor-dap: cannot read the finding of this stop: {error}")
            return None
        return finding if finding is not None and finding.rule in RULE_IDS else None


def _rule_id(entry: str) -> str:
    """``nan-inf@rank=1`` -> ``nan-inf``."""
    return entry.split("@", 1)[0]


def _rule_ids(spec: Optional[str]) -> Optional[set[str]]:
    """The rule ids of ``--rules`` (``default`` and ``all`` expanded); None when not given or
    unreadable (the adapter then behaves as if not told, and says why in its log)."""
    if spec is None:
        return None
    try:
        return {_rule_id(entry) for entry in parse_rules(spec)} if spec.strip() else set()
    except UnknownRuleError as error:
        log.warning("tensor-dap: ignoring --rules: %s", error)
        return None


def _names_breakpoint(text: Any) -> bool:
    """Whether debugpy's exception name is our TensorBreakpoint. Its first word: attached to a
    program started by a console script (``tensor-dap run``), debugpy appends "(note: full
    exception trace is shown but execution is paused at: <module>)"."""
    return str(text or "").split(" ", 1)[0].endswith(_BREAKPOINT_CLASS)
