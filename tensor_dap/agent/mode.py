"""The watch's per-op path: the ``TorchFunctionMode`` every torch op passes through, and what
it runs for each op.

A ``TorchFunctionMode`` receives each torch function called while the watch is active (tensor
methods, operators, ``torch.*`` functions, ``torch.nn.functional``). This path is the whole
cost of the engine, so it is lean:

- the function's *plan* (:mod:`tensor_dap.agent.plans`) says which rule checks apply; metadata
  reads such as ``t.grad`` or ``t.shape`` pass straight through;
- Tensor's operators (``a * b``, ``t += 1``...) skip the mode's dispatch and come straight to
  the same path (:mod:`tensor_dap.agent.operator_shadows`);
- the path runs in C where it is built (``_fastpath.c``, :mod:`tensor_dap.agent.native`),
  else in Python (:func:`handle_op`): the same steps, calling the same Python rules;
- no pytree walks: arguments are scanned one level deep;
- call sites are sampled (:mod:`tensor_dap.agent.sampling`): provenance and the trace look at
  the first 8 hits of each, then one in 64.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from tensor_dap.agent import native, operator_shadows
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.plans import PASS
from tensor_dap.agent.rules import RANKS_DIFFER
from tensor_dap.agent.rules.hooks import Args, Kwargs

if TYPE_CHECKING:
    from tensor_dap.agent.engine import Watch

_getframe = sys._getframe


def handle_op(
    mode: Any,
    op: Any,
    func: Any,
    args: tuple[Any, ...],
    kwargs: Any,
    caller: FrameType,
    subclasses: bool = False,
) -> Any:
    """Run ``func`` for the user's frame ``caller`` with the rules for ``op`` around it (the
    mode is off the stack here: torch popped it, or :mod:`operator_shadows` did).

    ``subclasses``: an argument is a tensor subclass with a ``__torch_function__`` of its own
    (torch's ``types``). The engine's own reads of the op's tensors (the rules' ``.device``,
    ``.grad_fn``, the books' ``untyped_storage()``...) then run with subclasses' torch functions
    off: they are not the program's ops, and a subclass that logs its ops would print them. The
    op itself still goes through the subclass.

    Every line here runs for every op: each is paid for in benchmarks/overhead.py. Its C twin
    in ``_fastpath.c`` runs the very same steps; change both together. What it reads of the
    mode and the watch by name is listed in :mod:`tensor_dap.agent.native`.
    """
    watch = mode.watch
    if watch._mode is None:  # the watch stopped; a thread's mode may outlive it
        return func(*args, **kwargs) if kwargs else func(*args)
    plan = watch._plans.get(op) or watch._plan(op)
    if plan is PASS:
        return func(*args, **kwargs) if kwargs else func(*args)
    info, before, after, observers = plan[:4]
    if len(plan) == 5:  # the program replaced this torch method: torch's original runs
        func = plan[4]
    if subclasses:
        return _with_subclasses_off(mode, op, func, args, kwargs, caller)
    for rule_id, check, _screen in before:  # (the C path skips checks their screen rules out)
        try:
            report = check(info, args, kwargs, caller, watch)
        except Exception as error:
            watch._rule_failed(rule_id, error)
            continue
        if report is not None:
            watch._emit(rule_id, report, info, caller)
    try:
        out = func(*args, **kwargs) if kwargs else func(*args)
    except RuntimeError as error:  # (out of memory: seen before the stack unwinds)
        if watch._raise_hooks:
            watch._raised(info, args, kwargs, error, caller)
        raise
    if out is NotImplemented:  # no op ran (``t @ 2``): Python tries the operand's side next
        return out
    # per call site: the first 8 hits in full, then one in 64 (provenance, trace). A site is
    # id(code) + instruction offset: unique among live code objects (the offset lies inside
    # the object), and an int hashes for free where a code object hashes its bytecode.
    site = id(caller.f_code) + caller.f_lasti
    site_hits = watch._site_hits
    hits = site_hits[site] = site_hits.get(site, 0) + 1
    if hits <= 8 or not hits & 63:  # literals: cheaper than globals on this path
        watch._sample(site, hits, info, sampled_arguments(args, kwargs), out, caller, observers)
    if after:
        watch._after(after, info, args, kwargs, out, caller)
    return out


def _with_subclasses_off(
    mode: Any, op: Any, func: Any, args: tuple[Any, ...], kwargs: Any, caller: FrameType
) -> Any:
    """:func:`handle_op` with subclasses' torch functions off for the engine's own steps and
    back as they were for the op itself (the guard left around ``func``, entered again after)."""
    guard = torch._C.DisableTorchFunctionSubclass()

    def run(*call_args: Any, **call_kwargs: Any) -> Any:
        guard.__exit__(None, None, None)
        try:
            return func(*call_args, **call_kwargs)
        finally:
            guard.__enter__()

    with guard:
        return handle_op(mode, op, run, args, kwargs, caller)


def has_subclass(types: Any, args: Args, kwargs: Kwargs) -> bool:
    """Whether the op's arguments hold a tensor subclass with a ``__torch_function__`` of its
    own: torch's ``types`` say so, but ``loss.backward(gradient=g)`` hands the mode
    ``(torch.Tensor,)`` for ``loss`` alone, so plain types there are checked against the
    arguments themselves, one level deep (plain tensors need no guard)."""
    if not types:
        return False
    plain = operator_shadows.PLAIN
    if any(kind not in plain for kind in types):
        return True
    values = (*args, *(kwargs or {}).values())
    return any(isinstance(v, torch.Tensor) and type(v) not in plain for v in values)


def sampled_arguments(args: tuple[Any, ...], kwargs: Any) -> tuple[Any, ...]:
    """``args`` followed by the values of ``kwargs``: what a sampled op's observers and
    provenance look at (``F.layer_norm`` and ``F.batch_norm`` hand the mode their weight and
    bias as keywords)."""
    return (*args, *kwargs.values()) if kwargs else args


def run_after(
    watch: Watch,
    after: tuple[Any, ...],
    info: OpInfo,
    args: tuple[Any, ...],
    kwargs: Any,
    out: Any,
    caller: FrameType,
) -> None:
    """The rules that look at an op's result (``nan-inf``): ``Watch._after``."""
    for rule_id, check in after:
        try:
            report = check(info, args, kwargs, out, caller, watch)
        except Exception:
            watch._rule_failed(rule_id)
            continue
        if report is not None:
            watch._emit(rule_id, report, info, caller)


class WatchMode(TorchFunctionMode):
    """The per-op hook; all state lives on the :class:`~tensor_dap.agent.engine.Watch`.

    One per thread the watch follows (a TorchFunctionMode is per thread); a thread's may
    outlive the watch and then lets every op through untouched.
    """

    #: the Python per-op path, for the Python operator shadows (which cannot import the engine)
    run: Callable[..., Any] = staticmethod(handle_op)

    def __init__(self, watch: Watch) -> None:
        super().__init__()
        self.watch = watch

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: Args = (),
        kwargs: Kwargs = None,
    ) -> Any:
        # (the Python path's; in C this is ``_fastpath.TorchFunction``: see use_native. It calls
        # handle_op itself, not ``self.run``: torch.compile inlines this and guards on what
        # it reads)
        caller: Any = _getframe(1)
        code = caller.f_code
        if code is operator_shadows.SHADOW_CODE:  # an operator the shadow handed on
            caller = caller.f_back
        elif code is _DISPATCH_CODE and caller.f_back is not None:  # see _DISPATCH_CODE
            caller = caller.f_back.f_back or caller
        return handle_op(self, func, func, args, kwargs, caller, has_subclass(types, args, kwargs))

    def enter(self) -> None:
        """Push this mode on the calling thread's torch-function stack."""
        self.__enter__()  # type: ignore[no-untyped-call]  # (torch leaves it untyped)


_python_torch_function = WatchMode.__torch_function__

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
    fastpath = native.fastpath if on else None
    native.enabled = fastpath is not None
    operator_shadows.release()  # the next watch installs the shadows of the path chosen
    # (a method replaced on the class: every mode, running or not, takes the new path)
    if fastpath is not None:
        WatchMode.__torch_function__ = fastpath.TorchFunction()  # type: ignore[method-assign]
    else:
        WatchMode.__torch_function__ = _python_torch_function  # type: ignore[method-assign]
    return native.enabled


native.configure(PASS, operator_shadows.PLAIN, RANKS_DIFFER)
use_native(True)
