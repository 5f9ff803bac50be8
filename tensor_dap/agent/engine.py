"""The watch engine: sees every torch operation user code performs and runs the enabled rules.

A ``TorchFunctionMode`` receives each torch function called while the watch is active (tensor
methods, operators, ``torch.*`` functions, ``torch.nn.functional``). The per-op path is the
whole cost of the engine, so it is lean:

- a per-function *plan* is computed once (:mod:`tensor_dap.agent.op_kinds`): which rule checks apply
  to that function; metadata reads such as ``t.grad`` or ``t.shape`` pass straight through;
- Tensor's operators (``a * b``, ``t += 1``...) skip the mode's dispatch and come straight to
  the same per-op path (:mod:`tensor_dap.agent.operator_shadows`);
- that path runs in C where it is built (``_fastpath.c``, :mod:`tensor_dap.agent.native`),
  else in Python (:func:`handle_op`): the same steps, calling the same Python rules;
- no pytree walks: arguments are scanned one level deep;
- provenance (where each tensor was created) is one dict insert per op;
- nothing at all is installed when no rule is enabled and no trace is recorded.

Rules live in :mod:`tensor_dap.agent.rules`, one module each. A rule that raises is logged and
switched off; nothing here raises into user code or changes what an op returns.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from types import FrameType, ModuleType
from typing import Any, Callable, Iterable, Optional

import torch
from torch.overrides import TorchFunctionMode

from tensor_dap.agent import (
    compile_guard,
    frames,
    naming,
    native,
    operator_shadows,
    optimizers,
    tensor_map,
)
from tensor_dap.agent.describe import describe_tensor
from tensor_dap.agent.library_calls import REWRAPPING, api_called
from tensor_dap.agent.no_grad_source import no_grad_site
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.op_kinds import classify as classify_op
from tensor_dap.agent.process import current_rank, process_info
from tensor_dap.agent.provenance import MAX_DEPTH, NODE_PROV_KEY, Prov, ProvenanceRegistry
from tensor_dap.agent.ranks import rules_for_rank
from tensor_dap.agent.rules import RANKS_DIFFER, Report, parse_rules, rule_modules
from tensor_dap.agent.threads import is_tool_thread
from tensor_dap.findings import Finding

log = logging.getLogger("tensor_dap.engine")

FindingSink = Callable[[Finding, Optional[FrameType]], None]

_Tensor = torch.Tensor
_getframe = sys._getframe
_SEQUENCES = (list, tuple)
_PASS = object()


def _accelerator_in_use() -> bool:
    """Whether tensors may already live on an accelerator when the watch starts."""
    try:
        if torch.cuda.is_initialized():
            return True
    except Exception:
        pass
    return torch._C._get_privateuse1_backend_name() != "privateuseone"


def handle_op(
    mode: Any, op: Any, func: Any, args: tuple[Any, ...], kwargs: Any, caller: FrameType
) -> Any:
    """Run ``func`` for the user's frame ``caller`` with the rules for ``op`` around it (the
    mode is off the stack here: torch popped it, or :mod:`operator_shadows` did).

    Every line here runs for every op: each is paid for in benchmarks/overhead.py. Its C twin
    in ``_fastpath.c`` runs the very same steps; change both together.
    """
    watch = mode.watch
    if watch._mode is None:  # the watch stopped; a thread's mode may outlive it
        return func(*args, **kwargs) if kwargs else func(*args)
    plan = watch._plans.get(op) or watch._plan(op)
    if plan is _PASS:
        return func(*args, **kwargs) if kwargs else func(*args)
    info, before, after, observers = plan
    for rule_id, check, _screen in before:  # (the C path skips checks their screen rules out)
        try:
            report = check(info, args, kwargs, caller, watch)
        except Exception as error:
            watch._rule_failed(rule_id, error)
            continue
        if report is not None:
            watch._emit(rule_id, report, info, caller)
    out = func(*args, **kwargs) if kwargs else func(*args)
    if out is NotImplemented:  # no op ran (``t @ 2``): Python tries the operand's side next
        return out
    # per call site: the first 8 hits in full, then one in 64 (provenance, trace). A site is
    # id(code) + instruction offset: unique among live code objects (the offset lies inside
    # the object), and an int hashes for free where a code object hashes its bytecode.
    site = id(caller.f_code) + caller.f_lasti
    site_hits = watch._site_hits
    hits = site_hits[site] = site_hits.get(site, 0) + 1
    if hits <= 8 or not hits & 63:  # literals: cheaper than globals on this path
        watch._sample(site, hits, info, args, out, caller, observers)
    if after:
        watch._after(after, info, args, kwargs, out, caller)
    return out


class _Mode(TorchFunctionMode):
    """The per-op hook; all state lives on the :class:`Watch`.

    One per thread the watch follows (a TorchFunctionMode is per thread); a thread's may
    outlive the watch and then lets every op through untouched.
    """

    #: the Python per-op path, for the Python operator shadows (which cannot import the engine)
    run: Callable[..., Any] = staticmethod(handle_op)

    def __init__(self, watch: Watch) -> None:
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        # (the Python path's; in C this is ``_fastpath.TorchFunction``: see use_native. It calls
        # handle_op itself, not ``self.run``: torch.compile inlines this and guards on what
        # it reads)
        caller = _getframe(1)
        code = caller.f_code
        if code is operator_shadows.SHADOW_CODE:  # an operator the shadow handed on
            caller = caller.f_back
        elif code is _DISPATCH_CODE and caller.f_back is not None:  # see _DISPATCH_CODE
            caller = caller.f_back.f_back or caller
        return handle_op(self, func, func, args, kwargs, caller)


_python_torch_function = _Mode.__torch_function__

#: ``F.relu(x)``, ``nn.init.uniform_(w)``... reach the mode through this one function of torch,
#: called by the function itself: the op's caller is the frame that called ``F.relu``, as for a
#: C function such as ``torch.relu`` (those two frames would make every such function one call
#: site, sampled after its first 8 hits in all, and hide the user's line from the rules)
_DISPATCH_CODE = torch.overrides.handle_torch_function.__code__


def use_native(on: bool) -> bool:
    """Run the per-op path in C when it is built (``on``), else in Python; whether C runs.

    In C, the mode's ``__torch_function__`` itself is C (``_fastpath.TorchFunction``: no
    Python frame between torch and the rules). The mode switches at once; Tensor's operators
    at the next watch that installs them (for tests and benchmarks, with no watch running).
    """
    native.enabled = on and native.fastpath is not None
    operator_shadows.release()  # the next watch installs the shadows of the path chosen
    if native.enabled:
        _Mode.__torch_function__ = native.fastpath.TorchFunction()
    else:
        _Mode.__torch_function__ = _python_torch_function
    return native.enabled


native.configure(_PASS, operator_shadows.PLAIN, RANKS_DIFFER)
use_native(True)


#: (rule ids planned for, accelerator seen, their hooks) -> {function: plan}; see
#: Watch._shared_plans
_SHARED_PLANS: dict[tuple[Any, ...], dict[Any, Any]] = {}
#: key of each shared dict's (rule ids, accelerator seen): what its plans are made for
_PLANNED_FOR = object()

_TOOL_MODULES = ("debugpy", "_pydevd", "pydevd", "_pydev", "tensor_dap")


def _is_tool_thread(thread: threading.Thread) -> bool:
    """A debugger's or tensor-dap's own thread: never watched (its tensor reads are ours)."""
    if is_tool_thread(thread):
        return True
    target = getattr(thread, "_target", None)
    for owner in (type(thread), target):
        module = getattr(owner, "__module__", None) or ""
        if module.startswith(_TOOL_MODULES):
            return True
    return thread.name.startswith(("pydevd.", "tensor-dap"))


def _thread_profile() -> Any:
    """The profile function ``threading`` gives new threads (``getprofile`` is 3.10+)."""
    getprofile = getattr(threading, "getprofile", None)
    return getprofile() if getprofile is not None else getattr(threading, "_profile_hook", None)


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
    """

    def __init__(
        self,
        rules: Optional[Iterable[str] | str] = None,
        on_finding: Optional[FindingSink] = None,
        recorder: Any = None,
        options: Optional[dict[str, dict[str, Any]]] = None,
        dedupe: bool = True,
    ) -> None:
        if rules is None or isinstance(rules, str):
            rules = parse_rules(rules)
        #: rule ids on in this process (entries limited to other ranks are left out)
        self.enabled: set[str] = set(rules_for_rank(rules, current_rank()))
        self.options = options or {}
        self.sinks: list[FindingSink] = [on_finding] if on_finding else []
        self.recorder = recorder
        self.dedupe = dedupe
        self.findings: list[Finding] = []
        self.counts: dict[tuple[str, str, int], int] = {}
        self.provenance = ProvenanceRegistry()
        #: rules switched off because they raised: id -> reason
        self.failed: dict[str, str] = {}
        #: shared scratch space of rules (e.g. tensors zeroed since the last optimizer step)
        self.rule_state: dict[str, Any] = {}
        self._modules: dict[str, ModuleType] = {m.RULE.id: m for m in rule_modules()}
        #: id(code) + instruction offset -> how often that call site ran
        self._site_hits: dict[int, int] = {}
        #: id(code) -> (code, {site key, ...}): keeps code objects alive (ids stay unique)
        self._site_codes: dict[int, tuple[Any, set[int]]] = {}
        #: an accelerator tensor has been seen: until then the rules that need one (catalog:
        #: ``needs_accelerator``) cannot fire and are left out of the per-op plans (a CPU-only
        #: program pays nothing for them)
        self.accelerator_seen = _accelerator_in_use()
        #: function -> plan (see _plan): shared by every watch planning for the same rules
        self._plans: dict[Any, Any] = self._shared_plans()
        self._mode: Optional[_Mode] = None
        self._handles: list[Any] = []
        self._lock = threading.Lock()
        self._emitting = False

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Watch:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        """Install the hooks in the calling thread (no-op when nothing is enabled)."""
        if self._mode is not None or not (self.enabled or self.recorder is not None):
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
        self._mode = _Mode(self)
        self._mode.__enter__()
        operator_shadows.track(self._mode)
        operator_shadows.install((_Mode,))
        optimizers.install((_Mode,))
        tensor_map.guard_swaps()
        compile_guard.install()
        self._operators = True
        self._follow_new_threads()

    _operators = False

    def stop(self) -> None:
        if self._operators:
            self._operators = False
            optimizers.uninstall()  # first: it puts back a mode a failed step took off
            operator_shadows.uninstall()
        if self._thread_hook is not None:
            if _thread_profile() is self._thread_hook:
                threading.setprofile(self._previous_profile)
            self._thread_hook = None
        if self._mode is not None:
            mode, self._mode = self._mode, None
            operator_shadows.untrack(self)
            try:
                # wherever it is: a mode the program pushed after it stays where it is
                operator_shadows.remove_mode(mode)
            except Exception:
                log.exception("tensor-dap: could not pop the watch mode")
        for handle in self._handles:
            with contextlib.suppress(Exception):
                handle.remove()
        self._handles.clear()

    _thread_hook: Optional[Callable[..., Any]] = None
    _previous_profile: Optional[Callable[..., Any]] = None

    def _follow_new_threads(self) -> None:
        """Watch the threads the program starts from now on, too.

        ``threading.setprofile`` hands a function to each new thread, called at its first
        Python call: it puts the thread's previous profile function back and pushes a
        :class:`_Mode` of its own there — once per thread, nothing per op. The debugger's and
        tensor-dap's own threads are left alone; threads started before the watch are not
        reached (a mode can only be pushed by its own thread).
        """
        previous = _thread_profile()

        def enter_thread(frame: FrameType, event: str, arg: Any) -> None:
            sys.setprofile(previous)
            try:
                if self._mode is not None and not _is_tool_thread(threading.current_thread()):
                    mode = _Mode(self)
                    mode.__enter__()
                    operator_shadows.track(mode)
            except Exception:
                log.exception("tensor-dap: could not watch a new thread")

        self._previous_profile = previous
        self._thread_hook = enter_thread
        threading.setprofile(enter_thread)

    def forget_parent(self) -> None:
        """In a forked child (a DataLoader worker): findings, counts and per-site hits of its
        own from now on, so that it reports what *it* does, also at lines its parent reported."""
        self.findings = []
        self.counts = {}
        self._site_hits = {}
        self._site_codes = {}
        self._lock = threading.Lock()
        self._emitting = False

    def set_enabled(self, rules: Iterable[str]) -> None:
        """Change the enabled rules while running (the debugger's checkboxes)."""
        self.enabled = set(rules_for_rank(rules, current_rank()))
        self._plans = self._shared_plans()

    # -- per-op ----------------------------------------------------------------------------
    def _shared_plans(self) -> dict[Any, Any]:
        """The plans for this watch's rules now. A plan depends on nothing but the function,
        the rules and whether an accelerator was seen, so watches share them: a watch started
        per call (``@tensor_dap.snoop`` on a function called in a loop) plans each op once."""
        active = sorted(self.enabled - self.failed.keys())
        # (the rules' hooks themselves are part of the key: a test may patch one)
        hooks = tuple(
            getattr(self._modules[rule_id], hook, None)
            for rule_id in active
            for hook in ("applies", "applies_before", "before", "after", "observe", "SCREEN")
        )
        key = (tuple(active), self.accelerator_seen, hooks)
        plans = _SHARED_PLANS.get(key)
        if plans is None:
            plans = _SHARED_PLANS[key] = {_PLANNED_FOR: (tuple(active), self.accelerator_seen)}
        return plans

    def _plan(self, func: Any) -> Any:
        # planned for the rules of the dict it goes in, read once: set_enabled (the debugger's
        # thread) may switch self._plans meanwhile, and a shared dict must hold its own plans
        plans = self._plans
        active, accelerator_seen = plans[_PLANNED_FOR]
        info = classify_op(func)
        if info.passthrough:
            plan: Any = _PASS
        else:
            before = []
            after = []
            observers = []
            for rule_id in active:
                module = self._modules[rule_id]
                if module.RULE.needs_accelerator and not accelerator_seen:
                    continue
                if hasattr(module, "observe"):  # sampled, so it sees every kind of op
                    observers.append((rule_id, module.observe))
                applies = getattr(module, "applies", None)
                applies_before = getattr(module, "applies_before", applies)
                if hasattr(module, "before") and (applies_before is None or applies_before(info)):
                    before.append((rule_id, module.before, getattr(module, "SCREEN", None)))
                if hasattr(module, "after") and (applies is None or applies(info)):
                    after.append((rule_id, module.after))
            plan = (info, tuple(before), tuple(after), tuple(observers))
        plans[func] = plan
        return plan

    def _sample(
        self,
        site: int,
        hits: int,
        info: OpInfo,
        args: tuple[Any, ...],
        out: Any,
        caller: FrameType,
        observers: tuple[Any, ...] = (),
    ) -> None:
        """Provenance, trace metadata and the rules' ``observe`` hooks (sampled per call site)."""
        try:
            if hits == 1:
                self._new_site(site, caller)
            for rule_id, observe in observers:
                try:
                    observe(info, args, out, caller, self)
                except Exception:
                    self._rule_failed(rule_id)
            if isinstance(out, _Tensor):
                self._record(info, args, out, caller)
            elif isinstance(out, tuple) or out.__class__ is list:
                for item in out:
                    if isinstance(item, _Tensor):
                        self._record(info, args, item, caller)
            elif out.__class__ is float and args and isinstance(args[0], _Tensor):
                self._record_number(info, args[0], out, caller)
        except Exception:  # the engine must never break the user's op
            log.exception("tensor-dap: internal error after %s", info.name)

    def _after(
        self,
        after: tuple[Any, ...],
        info: OpInfo,
        args: tuple[Any, ...],
        kwargs: Any,
        out: Any,
        caller: FrameType,
    ) -> None:
        """The rules that look at an op's result (``nan-inf``)."""
        for rule_id, check in after:
            try:
                report = check(info, args, kwargs, out, caller, self)
            except Exception:
                self._rule_failed(rule_id)
                continue
            if report is not None:
                self._emit(rule_id, report, info, caller)

    def _record(self, info: OpInfo, args: tuple[Any, ...], out: Any, caller: FrameType) -> None:
        """Provenance of one op output, and what the trace recorder wants of it."""
        if not out.is_cpu and not self.accelerator_seen and out.device.type != "meta":
            self._saw_accelerator()
        user = frames.user_frame(caller)
        if user is None:
            return
        if self.recorder is not None:
            self.recorder.observe(user, out, caller is user)
        op_name = info.name
        if caller is not user:  # an op inside torch's code: name what the user called
            source = args[0] if args else None
            rewrap = op_name in REWRAPPING and isinstance(source, _Tensor)
            # (a detach in torch's code that cuts gradient history is a cut, not a re-wrap)
            if rewrap and (out.requires_grad or not source.requires_grad):
                inherited = self.provenance.lookup(source)
                if inherited is not None:
                    self.provenance.record(out, inherited)
                    return
            op_name = api_called(caller, user) or op_name
        if out.requires_grad:
            prov = Prov(user.f_code.co_filename, user.f_lineno, op_name)
            node = out.grad_fn
            if node is not None:  # where this graph node was made (for inplace-saved)
                node.metadata[NODE_PROV_KEY] = prov
        else:  # keep how this tensor came to lack gradient history (for grad-lost)
            prov = _history(op_name, args, user, self.provenance)
        self.provenance.record(out, prov)

    def _record_number(self, info: OpInfo, tensor: Any, number: float, caller: FrameType) -> None:
        """A Python number read from a tensor with gradient history (``loss.item()``): kept, so
        that ``torch.tensor(losses)`` made of such numbers names the cut (see _history)."""
        if not tensor.requires_grad:
            return
        user = frames.user_frame(caller)
        if user is not None:
            where = (user.f_code.co_filename, user.f_lineno)
            how = ".item()" if info.name == "item" else f"{info.name}()"
            cut = f"{how}, whose Python number keeps no gradient history"
            self.provenance.record_number(number, Prov(*where, info.name, cut))

    def _new_site(self, site: int, caller: FrameType) -> None:
        code = caller.f_code
        entry = self._site_codes.get(id(code))
        if entry is None:
            entry = self._site_codes[id(code)] = (code, set())
        entry[1].add(site)

    def line_hits(self, code: Any, line: int) -> int:
        """How often ``line`` of ``code`` ran an op called directly from it (0 if never)."""
        entry = self._site_codes.get(id(code))
        if entry is None:
            return 0
        base = id(code)
        hits = self._site_hits
        return max(
            (hits.get(site, 0) for site in list(entry[1]) if line_of(code, site - base) == line),
            default=0,
        )

    def _saw_accelerator(self) -> None:
        """From now on every op's devices are compared."""
        if not self.accelerator_seen:
            self.accelerator_seen = True
            self._plans = self._shared_plans()

    # -- findings --------------------------------------------------------------------------
    def _emit(self, rule_id: str, report: Report, info: OpInfo, caller: FrameType) -> None:
        """Turn a rule's report into a finding at the user's line and hand it to the sinks."""
        if self._emitting:  # a sink (e.g. the debugger's REPL) ran torch code: ignore it
            return
        self._emitting = True
        try:
            # building the message touches tensors: keep every torch-function override out of it
            with torch._C.DisableTorchFunction():
                built = self._build_finding(rule_id, report, info, caller)
            if built is not None:  # the sinks (a debugger pause) run with torch as the user has it
                finding, user = built
                for sink in list(self.sinks):
                    try:
                        sink(finding, user)
                    except Exception:
                        log.exception("tensor-dap: a finding sink failed")
        except Exception:
            log.exception("tensor-dap: could not report a %s finding", rule_id)
        finally:
            self._emitting = False

    def _build_finding(
        self, rule_id: str, report: Report, info: OpInfo, caller: FrameType
    ) -> Optional[tuple[Finding, FrameType]]:
        user = report.frame or frames.user_frame(caller)
        if user is None:
            return None
        if report.at is not None:
            path, line = os.path.abspath(report.at[0]), report.at[1]
        else:
            path, line = os.path.abspath(user.f_code.co_filename), user.f_lineno
        key = (rule_id, path, line)
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            if self.dedupe and self.counts[key] > 1:
                return None
        names = naming.name_tensors(report.tensors, info.name, caller, user, report.operands)
        described = [
            describe_tensor(t, n, self.provenance.lookup(t) or naming.assigned_before(user, n))
            for t, n in zip(report.tensors, names)
        ]
        if report.at is not None:
            expression = naming.source_line(path, line)
        else:
            expression = naming.expression_text(user)
        message = report.message(described, expression)
        if message is None:  # the rule decided, seeing the source, that this is fine
            return None
        finding = Finding(
            rule=rule_id,
            path=path,
            line=line,
            message=message,
            tensors=[d.info() for d in described],
            process=process_info(),
        )
        self.findings.append(finding)
        return finding, user

    def _rule_failed(self, rule_id: str, error: Optional[BaseException] = None) -> None:
        """A rule raised (``error``, or the exception being handled): log it once, switch it
        off, keep the program running."""
        if rule_id in self.failed:
            return
        error = error if error is not None else sys.exc_info()[1]
        self.failed[rule_id] = failure_reason(error)
        log.warning("tensor-dap: rule %s failed and was switched off", rule_id, exc_info=error)
        self._plans = self._shared_plans()


def failure_reason(error: Optional[BaseException]) -> str:
    """``"NotImplementedError: Could not run 'aten::ne.Scalar' ..."``: one line of a summary
    (torch's messages can run to a hundred lines)."""
    if error is None:
        return "unknown error"
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    if len(first) > 160:
        first = first[:157] + "..."
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


_LINE_TABLES: dict[int, tuple[Any, list[tuple[int, int, Optional[int]]]]] = {}


def line_of(code: Any, lasti: int) -> Optional[int]:
    """The source line of the instruction at offset ``lasti`` in ``code``."""
    cached = _LINE_TABLES.get(id(code))
    table = cached[1] if cached is not None else None
    if table is None:
        if hasattr(code, "co_lines"):
            table = list(code.co_lines())
        else:  # Python 3.9
            import dis

            starts = list(dis.findlinestarts(code))
            ends = [offset for offset, _ in starts[1:]] + [len(code.co_code)]
            table = [(start, end, line) for (start, line), end in zip(starts, ends)]
        _LINE_TABLES[id(code)] = (code, table)
    for start, end, line in table:
        if start <= lasti < end:
            return line
    return None


#: how many tensors of one list argument (``torch.cat(pieces)``) provenance looks at
_LIST_INPUTS = 64


def _history(
    op_name: str, args: tuple[Any, ...], user: FrameType, registry: ProvenanceRegistry
) -> Prov:
    """The Prov of a tensor without gradient history made by ``op_name`` from ``args`` at
    ``user``'s line: its parents' Provs, or the cut, when an input required grad. Inputs
    inside list and tuple arguments count (``torch.cat(pieces)``, ``torch.tensor([a, b])``), and
    so do numbers read from tensors with history (``torch.tensor([loss.item(), ...])``)."""
    parents: list[Prov] = []
    cut = None
    untracked = False
    grad_enabled = torch.is_grad_enabled()
    for arg in args:
        items = arg[:_LIST_INPUTS] if arg.__class__ in _SEQUENCES else (arg,)
        for item in items:
            if item.__class__ is float:  # a number read by .item() from a tensor with history
                read = registry.lookup_number(item)
                if read is not None:
                    parents.append(read)
            elif isinstance(item, _Tensor):
                if item.requires_grad:
                    cut = _cut_description(op_name, grad_enabled)
                else:
                    parent = registry.lookup(item)
                    if parent is not None:
                        parents.append(parent)
                    else:
                        untracked = True
    cut_at = next((p.cut_at for p in parents if p.cut_at is not None), None)
    depth = 1 + max((p.depth for p in parents), default=0)
    if depth > MAX_DEPTH:
        parents, depth = [], 0
    site = no_grad_site(user) if cut is not None and not grad_enabled else None
    path, line = user.f_code.co_filename, user.f_lineno
    return Prov(path, line, op_name, cut, tuple(parents), depth, cut_at, site, untracked)


def _cut_description(op_name: str, grad_enabled: bool) -> str:
    if not grad_enabled:
        return f"{op_name} under torch.no_grad()"
    if op_name == "data":
        return ".data"
    if op_name in ("detach", "detach_"):
        return "detach()"
    if op_name in ("tensor", "as_tensor", "new_tensor", "from_numpy"):
        return f"torch.{op_name}(...) re-wrapping"
    return f"{op_name}(), which has no gradient"
