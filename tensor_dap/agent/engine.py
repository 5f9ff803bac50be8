"""The watch engine: sees every torch operation user code performs and runs the enabled rules.

:class:`Watch` is what ``tensor_dap.watch()``, ``tensor-dap check``, the debug adapter's agent
and the tracer run; this module is its lifecycle: the state a watch keeps, installing its hooks
(the mode in the calling thread and the threads started after it, Tensor's operators, the
optimizers' steps, the rules' own hooks) and removing them. Each job of the running watch
lives in a module of its own:

- :mod:`tensor_dap.agent.mode`: the ``TorchFunctionMode`` and the per-op path (in C where it is
  built: ``_fastpath.c``, :mod:`tensor_dap.agent.native`);
- :mod:`tensor_dap.agent.plans`: which rule checks apply to each torch function, worked out once;
- :mod:`tensor_dap.agent.sampling`: provenance and trace metadata of a sample of ops per call
  site (with :mod:`tensor_dap.agent.lineage` for tensors without gradient history);
- :mod:`tensor_dap.agent.reporting`: a rule's report made a finding at the user's line.

Nothing at all is installed when no rule is enabled and no trace is recorded. Rules live in
:mod:`tensor_dap.agent.rules`, one module each. A rule that raises is logged and switched off;
nothing here raises into user code or changes what an op returns.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from types import FrameType
from typing import Any, Callable, Iterable, Optional

from tensor_dap.agent import (
    accelerators,
    compile_guard,
    dispatch_shortcut,
    mode,
    operator_shadows,
    optimizers,
    plans,
    reporting,
    sampling,
    tensor_map,
    warning_lines,
)
from tensor_dap.agent import memory as memory_ledger
from tensor_dap.agent.mode import WatchMode
from tensor_dap.agent.process import current_rank, process_info
from tensor_dap.agent.provenance import ProvenanceRegistry
from tensor_dap.agent.ranks import rules_for_rank
from tensor_dap.agent.rules import memory_limit, parse_rules, rule_modules
from tensor_dap.agent.threads import NewThreads
from tensor_dap.findings import Finding

#: ``process_info`` is imported from here by the CLI (check, trace)
__all__ = ["FindingSink", "Watch", "process_info"]

log = logging.getLogger("tensor_dap.engine")

FindingSink = Callable[[Finding, Optional[FrameType]], None]


class Watch:
    """Watch the tensor operations of a block of code::

        with tensor_dap.watch(rules=["device-mismatch"]) as w:
            train()
        print(w.findings)

    ``rules``: ids, or a spec string such as ``"default"``, ``"all"`` or ``"a,b"``.
    ``on_finding``: called with each new finding and the user's frame, *before* the op that
    caused it runs (the debug adapter suspends the program there).
    ``recorder``: an object with ``observe(frame, tensor, direct)`` receiving op outputs of
    user lines (``direct``: called by that frame itself) (the trace store recorder); ``None``
    records nothing.
    ``options``: per-rule options, e.g. ``{"leaves-device": {"scalars": True}}``.
    ``memory``: keep the books of live tensor memory per device (``self.memory``, a
    :class:`~tensor_dap.agent.memory.MemoryLedger`; ``check --memory``).
    """

    def __init__(
        self,
        rules: Optional[Iterable[str] | str] = None,
        on_finding: Optional[FindingSink] = None,
        recorder: Any = None,
        options: Optional[dict[str, dict[str, Any]]] = None,
        dedupe: bool = True,
        memory: bool = False,
    ) -> None:
        if rules is None or isinstance(rules, str):
            rules = parse_rules(rules)
        else:  # (a list may hold "default", "all", ranks...: read as the comma list is)
            rules = parse_rules(",".join(rules)) if rules else []
        #: rule ids on in this process (entries limited to other ranks are left out)
        self.enabled: set[str] = set(rules_for_rank(rules, current_rank()))
        self.options = options or {}
        self.sinks: list[FindingSink] = [on_finding] if on_finding else []
        self.recorder = recorder
        self.dedupe = dedupe
        self.findings: list[Finding] = []
        #: the program raised an uncaught exception (set by :meth:`program_failed`)
        self.program_raised = False
        self.counts: dict[tuple[str, str, int], int] = {}
        self.provenance = ProvenanceRegistry()
        #: rules switched off because they raised: id -> reason
        self.failed: dict[str, str] = {}
        #: shared scratch space of rules (e.g. tensors zeroed since the last optimizer step)
        self.rule_state: dict[str, Any] = {}
        self._modules: dict[str, Any] = {m.RULE.id: m for m in rule_modules()}
        #: ``check --memory``: the books planned on every op (a memory limit's rule keeps
        #: them itself while it is on)
        self._keep_books = memory
        limit = memory_limit.limit_of(self.options)
        self.memory = memory_ledger.MemoryLedger() if memory or limit else None
        if self.memory is not None:
            self.memory.limit = limit
            self._modules[memory_ledger.PLAN_ID] = memory_ledger.PLAN_HOOKS
        #: (rule id, hook) of the rules on with a ``raised`` hook (see :meth:`_raised`)
        self._raise_hooks: tuple[tuple[str, Any], ...] = ()
        #: id(code) + instruction offset -> how often that call site ran
        self._site_hits: dict[int, int] = {}
        #: hits counted before the last :meth:`resample` (for :meth:`line_hits`)
        self._hits_before: dict[int, int] = {}
        #: id(code) -> (code, {site key, ...}): keeps code objects alive (ids stay unique)
        self._site_codes: dict[int, tuple[Any, set[int]]] = {}
        #: an accelerator tensor has been seen: until then the rules that need one (catalog:
        #: ``needs_accelerator``) cannot fire and are left out of the per-op plans (a CPU-only
        #: program pays nothing for them)
        self.accelerator_seen = accelerators.in_use()
        #: function -> plan (see _plan): shared by every watch planning for the same rules
        self._plans: dict[Any, Any] = {}
        #: hook modules on besides the rules, by id, planned like a rule (the debugger's data
        #: breakpoints: :mod:`tensor_dap.agent.data_write`); see :meth:`set_hook`
        self.hooks: dict[str, Any] = {}
        self._replan()
        self._mode: Optional[WatchMode] = None
        self._handles: list[Any] = []
        self._lock = threading.Lock()
        self._emitting = False
        self._new_threads: Optional[NewThreads] = None
        self._operators = False

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Watch:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        """Install the hooks in the calling thread (no-op when nothing is enabled)."""
        watching = self.enabled or self.recorder is not None or self.hooks or self._keep_books
        if self._mode is not None or not watching:
            return
        # every rule's hooks, enabled or not: they check ``enabled`` when they fire, so a rule
        # switched on later (the debugger's checkboxes) works at once
        for rule_id, module in self._modules.items():
            install = getattr(module, "install", None)
            if install is not None:
                try:
                    self._handles.extend(install(self))
                except Exception:
                    self._rule_failed(rule_id)
        if not self.accelerator_seen:  # a backend set up later: tensors may enter without an op
            self._handles.append(accelerators.install(self._saw_accelerator))
        self._mode = WatchMode(self)
        self._mode.enter()
        operator_shadows.track(self._mode)
        operator_shadows.install((WatchMode,))
        dispatch_shortcut.install((WatchMode,))
        optimizers.install((WatchMode,))
        tensor_map.guard_swaps()
        compile_guard.install()
        warning_lines.install()
        self._operators = True
        # the threads the program starts from now on get a mode of their own
        self._new_threads = NewThreads(self._enter_thread)

    def stop(self) -> None:
        if self._operators:
            self._operators = False
            optimizers.uninstall()  # first: it puts back a mode a failed step took off
            operator_shadows.uninstall()
            dispatch_shortcut.uninstall()
        if self._new_threads is not None:
            self._new_threads.stop()
            self._new_threads = None
        if self._mode is not None:
            watch_mode, self._mode = self._mode, None
            operator_shadows.untrack(self)
            try:
                # wherever it is: a mode the program pushed after it stays where it is
                operator_shadows.remove_mode(watch_mode)
            except Exception:
                log.exception("tensor-dap: could not pop the watch mode")
        for handle in self._handles:
            with contextlib.suppress(Exception):
                handle.remove()
        self._handles.clear()

    def program_failed(self) -> None:
        """The program raised an uncaught exception (``tensor-dap check``), whose frames are
        about to be let go: what it did not get to do, such as the ``backward()`` of a loss,
        is then no finding (:attr:`program_raised`)."""
        self.program_raised = True

    def finish(self) -> None:
        """The program ended: the enabled rules' ``finish`` hooks report what only its end
        shows (a graph still kept by a total no ``backward()`` went through), at their lines,
        without a frame to pause in (``tensor-dap check``, a watched child process)."""
        for rule_id in sorted(self.enabled - self.failed.keys()):
            hook = getattr(self._modules.get(rule_id), "finish", None)
            if hook is None:
                continue
            try:
                reports = hook(self)
            except Exception as error:
                self._rule_failed(rule_id, error)
                continue
            for report in reports:
                self._emit(rule_id, report, reporting.END_OF_PROGRAM, None)

    def _enter_thread(self) -> None:
        """In a thread the program started: push a mode of this watch there."""
        if self._mode is not None:
            thread_mode = WatchMode(self)
            thread_mode.enter()
            operator_shadows.track(thread_mode)

    def forget_parent(self) -> None:
        """In a forked child (a DataLoader worker): findings, counts and per-site hits of its
        own from now on, so that it reports what *it* does, also at lines its parent reported."""
        self.findings = []
        self.counts = {}
        self._site_hits = {}
        self._hits_before = {}
        self._site_codes = {}
        self._lock = threading.Lock()
        self._emitting = False

    def resample(self) -> None:
        """Sample the next ops of every call site as if it were new (the first 8 in full):
        a rule whose case begins now (``model.eval()``) sees it, not one op in 64."""
        hits, self._site_hits = self._site_hits, {}
        before = self._hits_before
        for site, count in hits.items():
            before[site] = before.get(site, 0) + count

    def set_enabled(self, rules: Iterable[str]) -> None:
        """Change the enabled rules while running (the debugger's checkboxes)."""
        self.enabled = set(rules_for_rank(rules, current_rank()))
        self._replan()

    def set_hook(self, hook_id: str, module: Optional[Any]) -> None:
        """Plan ``module`` (a rule-like module: ``RULE``, ``applies``, ``before``...) as if its
        rule were on, or stop planning it (``None``); a failure switched off before is forgotten."""
        if module is None:
            self.hooks.pop(hook_id, None)
        else:
            self.hooks[hook_id] = module
        self.failed.pop(hook_id, None)
        self._replan()

    def _replan(self) -> None:
        """Take the plans for the rules on now (see :mod:`tensor_dap.agent.plans`)."""
        active = (self.enabled | self.hooks.keys()) - self.failed.keys()
        books = self._keep_books and memory_limit.RULE.id not in active
        if books and memory_ledger.PLAN_ID not in self.failed:
            active = active | {memory_ledger.PLAN_ID}
        modules = {**self._modules, **self.hooks} if self.hooks else self._modules
        self._raise_hooks = tuple(
            (rule_id, modules[rule_id].raised)
            for rule_id in sorted(active)
            if hasattr(modules[rule_id], "raised")
        )
        self._plans = plans.shared_plans(active, self.accelerator_seen, modules)

    def _saw_accelerator(self) -> None:
        """From now on every op's devices are compared."""
        if not self.accelerator_seen:
            self.accelerator_seen = True
            self._replan()

    # -- what the per-op path calls --------------------------------------------------------
    # Module functions taking the watch, bound here as its methods: the C fast path calls
    # them by name on the watch (see tensor_dap.agent.native.WATCH_ATTRIBUTES).
    _plan = plans.make_plan
    _sample = sampling.sample
    _after = mode.run_after
    _emit = reporting.emit
    #: an op raised (``error``), before the stack unwinds: the ``raised`` hooks (out-of-memory)
    _raised = reporting.raised
    _rule_failed = reporting.rule_failed
    #: how often a line of a code object ran an op called from it (for the trace store)
    line_hits = sampling.line_hits
