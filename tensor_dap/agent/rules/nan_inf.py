"""``nan-inf``: the first op of user code that produces NaN or Inf from finite inputs, and the
first graph node whose backward does (see the end of this module).

Opt-in: it must read every floating-point output (on an accelerator, a device sync per op).
The check reads the output only; inputs (those inside list/tuple arguments too) are read only
when the output is not finite, to tell "made NaN here" from "passed NaN along". A tensor it
cannot read (a type without ``isfinite``, fake or meta data) makes it skip that op, never the
rest of the run.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
from collections import deque
from functools import partial
from typing import Any, Callable, Optional

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from tensor_dap import catalog
from tensor_dap.agent import frames, naming
from tensor_dap.agent.graph_nodes import (
    accumulates_grad,
    graph_node,
    saved_attribute_names,
    saved_value,
)
from tensor_dap.agent.op_kinds import AUGMENTED, OpInfo
from tensor_dap.agent.provenance import NODE_PROV_KEY
from tensor_dap.agent.rules import Report
from tensor_dap.agent.rules.grad_lost import backward_targets
from tensor_dap.agent.rules.hooks import Args, Kwargs

RULE = catalog.rule("nan-inf")

_Tensor = torch.Tensor


#: factories whose result is uninitialised memory: garbage, NaN included, until written
_UNINITIALISED = ("empty", "new_empty")


def applies(op: OpInfo) -> bool:
    # (a backward call's ``after`` collects what its graph's hooks saw: see ``before``)
    return not op.name.startswith(_UNINITIALISED)


def applies_before(op: OpInfo) -> bool:
    # (an in-place op's target is read before it runs: after, its old values are gone)
    return op.backward or op.inplace


_COMPRESSED = (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_plain_dispatch = torch.Tensor.__torch_dispatch__


def _parts(tensor: Any) -> Optional[list[Any]]:
    """The dense tensors holding ``tensor``'s values, or ``None`` when it cannot be judged.

    Tensor types the rule did not write are judged through their storage of values (sparse
    ``values``, a nested tensor's buffer, a traceable wrapper subclass's inner tensors: DTensor's
    local shard) or not at all:
    ``isfinite`` is not implemented for many of them, and one such op must not switch the rule
    off for the whole run.
    """
    if not tensor.is_floating_point() and not tensor.is_complex():
        return []  # integers, bools and quantized tensors hold no NaN
    kind = type(tensor)
    # (a wrapper subclass that is not traceable, such as FakeTensor, is read as it is: one that
    # has no data raises there, and the op is skipped)
    if (
        kind not in _PLAIN
        and kind.__torch_dispatch__ is not _plain_dispatch
        and is_traceable_wrapper_subclass(tensor)
    ):
        inner_names, _ = tensor.__tensor_flatten__()
        parts: list[Any] = []
        for name in inner_names:
            inner = getattr(tensor, name)
            found = _parts(inner) if isinstance(inner, _Tensor) else []
            if found is None:
                return None
            parts.extend(found)
        return parts
    # a subclass of the program's (a LoggingTensor): reading it would run its code, which sees
    # ops it never asked for (the stand-in accelerator is tensor-dap's own)
    if (
        kind not in _PLAIN
        and kind.__torch_dispatch__ is not _plain_dispatch
        and not kind.__module__.startswith("tensor_dap.")
    ):
        return None
    if tensor.device.type == "meta":
        return None
    layout = tensor.layout
    if layout is torch.sparse_coo:
        return [tensor._values()]
    if layout in _COMPRESSED:
        return [tensor.values()]
    if tensor.is_nested:
        return [tensor.values()]
    if layout is not torch.strided:  # mkldnn...
        return None
    return [tensor]


def _finite(tensor: Any) -> Optional[bool]:
    """Whether every value of ``tensor`` is finite; ``None`` when that cannot be told."""
    parts = _parts(tensor)
    if parts is None:
        return None
    # (a plain subclass's own __torch_function__ and the program's modes do not see our reads,
    # nor, for plain tensors, its dispatch modes: a FlopCounterMode, a logging mode)
    with torch._C.DisableTorchFunction(), torch.no_grad():
        for part in parts:
            if not part.numel():
                continue
            if type(part) in _PLAIN:
                with torch._C._DisableTorchDispatch():
                    finite = _all_finite(part)
            else:
                finite = _all_finite(part)
            if not finite:
                return False
    return True


def _all_finite(tensor: Any) -> bool:
    """A sum is NaN or Inf when any value is (3 µs on CPU where ``isfinite().all()`` takes 18);
    it may also overflow from finite values (float16): a sum that is not finite is confirmed."""
    if not tensor.is_complex() and math.isfinite(tensor.sum().item()):
        return True
    return bool(torch.isfinite(tensor).all())


def _inputs(args: Args, kwargs: Kwargs) -> tuple[list[Any], bool]:
    """The tensors an op received, those inside list/tuple arguments included (one level, like
    the engine: ``torch.stack([t, u])``), and whether they are its first positional operands in
    order (so the expression's operand texts name them: not after a number, ``torch.add(1,
    x)``)."""
    inputs: list[Any] = []
    direct = True
    for value in (*args, *(kwargs.values() if kwargs else ())):
        if isinstance(value, _Tensor):
            direct = direct and len(inputs) < len(args) and args[len(inputs)] is value
            inputs.append(value)
        elif isinstance(value, (list, tuple)):
            items = [item for item in value if isinstance(item, _Tensor)]
            if items:
                inputs.extend(items)
                direct = False
    return inputs, direct  # (a tensor passed by keyword comes after the positional ones)


def after(
    op: OpInfo,
    args: Args,
    kwargs: Kwargs,
    out: Any,
    caller: Any,
    state: Any,
) -> Optional[Report]:
    if op.backward:
        return _backward_done(caller, state)
    if caller.f_code.co_name in _SCALING and op.name in _MULS:
        _mark_scaled(out, caller)
    if not isinstance(out, _Tensor) or torch._C._get_tracing_state() is not None:
        return None  # (under torch.jit.trace our reads would be traced into the program's graph)
    if _profiling():  # (the program's profile would count our reads as its ops)
        return None
    try:
        if _finite(out) is not False:
            return None
        if _asks_for_non_finite(args, kwargs):  # masked_fill(mask, float("-inf")): on purpose
            return None
        inputs, operands = _inputs(args, kwargs)
        # an input holding NaN passed it along; one that cannot be judged might have
        # (an in-place op's target as it was before the op: ``deg.pow_(-0.5)``)
        if op.inplace and inputs and inputs[0] is out:
            if state.rule_state.get(_TARGET_BEFORE) != (id(out), True):
                return None
            if not all(_finite(t) for t in inputs[1:]):
                return None
        elif not all(_finite(t) for t in inputs):
            return None
        if _handled_by_program(caller):
            return None
        message = _message(op.name, out, inputs, args, kwargs)
        _mark_reported(out)
    except Exception:  # a tensor type that cannot be judged: skip this op, not the rule
        return None
    return Report(tensors=[*inputs, out], message=message, operands=operands, result=True)


#: what handles Inf/NaN in the program's own code: a test for them, a replacement, a clamp,
#: a mask
_HANDLING = re.compile(
    r"\b(isinf|isnan|isfinite|isposinf|isneginf|nan_to_num_?|masked_fill_?|where|clamp_?|"
    r"clamp_min_?|clamp_max_?|clip_?)\(|\binf\b|\bnan\b"
)
#: the statements after the op's line looked at
_LOOK_AHEAD = 2


def _handled_by_program(caller: Any) -> bool:
    """Whether the program deals with the Inf/NaN it just made, on the op's line or the next
    statements: GCN normalisation as PyTorch Geometric 1.x writes it, ``dinv = deg.pow(-0.5)``
    then ``dinv[dinv == float("inf")] = 0`` (pygcn: ``r_inv[torch.isinf(r_inv)] = 0``),
    ``torch.nan_to_num(torch.log(p))``, ``x.masked_fill_(deg == 0, 0)`` on the next line. A
    gradient it makes NaN there (``torch.where`` over a log at 0) is still found in backward."""
    user = frames.user_frame(caller)
    if user is None:
        return False
    path, line = user.f_code.co_filename, user.f_lineno
    here = naming.source_line(path, line)
    if _HANDLING.search(here):
        return True
    names = {name for name in (naming.assignment_target(path, line),) if name}
    names.update(re.findall(r"(\w+)\.\w+_\(", here))  # deg.pow_(-0.5): deg
    for offset in range(1, _LOOK_AHEAD + 1):
        following = naming.source_line(path, line + offset)
        for name in names:
            if re.search(rf"(?<![\w.]){re.escape(name)}\b", following) and (
                _HANDLING.search(following)
                or re.match(rf"{re.escape(name)}\s*\[.*\]\s*=[^=]", following)
            ):
                return True
    return False


def _asks_for_non_finite(args: Args, kwargs: Kwargs) -> bool:
    """A number argument is itself Inf or NaN: the op was asked for it (a causal mask made by
    ``torch.full((n, n), float("-inf"))`` or ``scores.masked_fill(mask, float("-inf"))``)."""
    for value in (*args, *(kwargs.values() if kwargs else ())):
        items = value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            if isinstance(item, float) and not math.isfinite(item):
                return True
    return False


#: ``grad_fn.metadata`` key: the forward check reported this node's output (its backward, which
#: sees the same non-finite values, is not reported again)
_REPORTED = "tensor_dap.nan-inf"


# -- a loss scaled by ``GradScaler`` ---------------------------------------------------------
#
# Mixed precision in float16 scales the loss (``scaler.scale(loss).backward()``) so that small
# gradients survive; a scale too large makes some overflow to Inf, and the scaler is built for
# it: ``scaler.step`` skips that step and ``scaler.update`` halves the scale. Its first steps
# overflow by design (the scale starts at 2**16). Such a backward's non-finite gradients are
# left to the scaler unless they keep coming: after :data:`SCALER_GIVES_UP` scaled backward
# calls in a row made them, the scale is not the cause (a sqrt at 0, a log at 0: the scaler
# would skip every step and shrink the scale for ever) and the rule reports.

#: scaled backward calls in a row with non-finite gradients before the rule reports them
SCALER_GIVES_UP = 8
#: ``grad_fn.metadata`` key: this node multiplied a loss by a ``GradScaler``'s scale
_SCALED = "tensor_dap.nan-inf.scaled"
_SCALED_IN_A_ROW = "nan-inf.scaled-in-a-row"
#: where ``GradScaler.scale`` (torch.amp, FSDP's ShardedGradScaler) multiplies its outputs
_SCALING = frozenset(("scale", "apply_scale"))
_MULS = frozenset(("mul", "__mul__", "__rmul__"))


def _mark_scaled(out: Any, caller: Any) -> None:
    if "grad_scaler" not in caller.f_code.co_filename or not isinstance(out, _Tensor):
        return
    node = graph_node(out)
    if node is not None:
        node.metadata[_SCALED] = True


def _scaled(roots: list[Any]) -> bool:
    """Whether a backward from ``roots`` starts at a loss a ``GradScaler`` scaled."""
    return any(node.metadata.get(_SCALED) for node in roots)


def _left_to_the_scaler(session: _Backward, state: Any) -> bool:
    """Whether this scaled backward's non-finite gradients are the scaler's to handle (see
    above); counts the scaled backward calls in a row that made them."""
    if not session.scaled:
        return False
    if session.first is None:
        state.rule_state[_SCALED_IN_A_ROW] = 0
        return False
    in_a_row: int = state.rule_state.get(_SCALED_IN_A_ROW, 0) + 1
    state.rule_state[_SCALED_IN_A_ROW] = in_a_row
    return in_a_row < SCALER_GIVES_UP


def _mark_reported(out: Any) -> None:
    node = graph_node(out)
    if node is not None:
        node.metadata[_REPORTED] = True


def _message(op_name: str, out: Any, inputs: list[Any], args: Args, kwargs: Kwargs) -> Any:
    nans = infs = 0
    parts = _parts(out) or []
    with torch._C.DisableTorchFunction(), _unseen([*parts, *inputs]):
        for part in parts:
            nans += int(torch.isnan(part).sum())
            infs += int(torch.isinf(part).sum())
        try:
            written = bool(inputs) and inputs[0] is out  # (an in-place op: its input is gone)
            if written:
                hint = _written_hint(op_name, args)
            else:
                hint = _ignored_targets_hint(op_name, inputs, args, kwargs) or _forward_hint(
                    op_name, inputs, args
                )
        except Exception:  # a tensor type that cannot be compared: no advice, still the finding
            hint = _no_hint

    def build(described: list[Any], expression: str) -> str:
        *operands, result = described
        names = ", ".join(f"{d.name} {d.shape_text}" for d in operands) or "inputs"
        advice = hint([d.name for d in operands], result.dtype)
        return (
            f"`{expression}`: {op_name} produced {nans} NaN and {infs} Inf values "
            f"({result.shape_text} {result.dtype}) from finite {names}.{advice}"
        )

    return build


_DIVIDING = frozenset(
    ("div", "truediv", "true_divide", "rtruediv", "rdiv", "reciprocal", "rsqrt", "floor_divide")
)
_LOGS = frozenset(("log", "log2", "log10", "log1p", "xlogy"))
_DOMAIN = frozenset(("acos", "asin", "atanh", "arccos", "arcsin", "arctanh", "acosh"))


def _written_hint(op_name: str, args: Args) -> Callable[[list[str], str], str]:
    """Advice for an in-place op (``deg.pow_(-0.5)``, ``x.log_()``), whose input values are
    overwritten: what they must have held, from the op alone."""
    op = op_name.strip("_")
    exponent = args[1] if len(args) > 1 and isinstance(args[1], (int, float)) else None
    if op in _DIVIDING or (op == "pow" and exponent is not None and exponent < 0):
        return lambda names, _dtype: (
            f" {_named(names, 0)} held 0 where it is now Inf: add an epsilon or clamp it "
            "first (`.clamp_min(1e-8)`), or mask those entries (a graph's isolated nodes: "
            "add self-loops)."
        )
    if op in _LOGS or op == "sqrt":
        return lambda names, _dtype: (
            f" {_named(names, 0)} held values outside the function's domain (<= 0): clamp it "
            "first (`.clamp_min(1e-8)`)."
        )
    return _no_hint


#: losses averaging over the targets not equal to ``ignore_index``
_IGNORING = frozenset(("cross_entropy", "nll_loss"))


def _ignored_targets_hint(
    op_name: str, inputs: list[Any], args: Args, kwargs: Kwargs
) -> Optional[Callable[[list[str], str], str]]:
    """A mean loss over targets that all equal ``ignore_index`` (a masked-LM batch with no
    masked token, a padded batch of padding): 0 / 0. None when that is not the cause."""
    named = kwargs or {}
    if op_name not in _IGNORING or named.get("reduction", "mean") != "mean" or len(inputs) < 2:
        return None
    ignore = named.get("ignore_index", -100)
    target = inputs[1]
    if not isinstance(ignore, int) or target.is_floating_point() or target.numel() == 0:
        return None
    try:
        if bool((target != ignore).any()):
            return None
    except Exception:  # (a target type that cannot say: no advice)
        return None
    return lambda names, _dtype: (
        f" Every target in {_named(names, 1)} equals ignore_index ({ignore}), so the mean is "
        "over no target: 0 / 0. Skip such a batch (`if (targets != ignore_index).any():`), or "
        'sum the loss (reduction="sum") and divide by the count of kept targets, at least 1.'
    )


def _forward_hint(op_name: str, inputs: list[Any], args: Args) -> Callable[[list[str], str], str]:
    """Advice for the usual causes, judged from the op and its (finite) inputs, as a function
    of the inputs' names and the result's dtype: a 0 divided by (a node of degree 0 under
    ``deg.pow(-0.5)``), a log or a square root of what is not positive, an input outside an
    inverse sine's domain, an overflow."""
    op = op_name.strip("_")
    op = op[1:] if op_name in AUGMENTED else op  # __itruediv__: truediv
    exponent = args[1] if len(args) > 1 and isinstance(args[1], (int, float)) else None
    first = inputs[0] if inputs and inputs[0].is_floating_point() else None
    if op in _DIVIDING or (op == "pow" and exponent is not None and exponent < 0):
        # the divisor: the second input of a division, else the first (reciprocal, pow)
        order = [1, 0] if len(inputs) > 1 else [0]
        at = next((i for i in order if i < len(inputs) and _holds(inputs[i], inputs[i] == 0)), None)
        # (a node's degree to a negative power: the isolated nodes of a graph)
        graph = " (a graph's isolated nodes: add self-loops)" if len(inputs) == 1 else ""
        if at is not None:
            return lambda names, _dtype: (
                f" {_named(names, at)} holds 0: add an epsilon (`+ 1e-8`) or clamp it "
                f"(`.clamp_min(1e-8)`), or mask those entries{graph}."
            )
    if first is not None and op in _LOGS and _holds(first, first <= (-1 if op == "log1p" else 0)):
        return lambda names, _dtype: (
            f" {_named(names, 0)} holds values <= 0: clamp it (`.clamp_min(1e-8)`) or stay in "
            "log space (`F.log_softmax`, `torch.logsumexp`)."
        )
    if first is not None and op == "sqrt" and _holds(first, first < 0):
        return lambda names, _dtype: f" {_named(names, 0)} holds negative values: clamp it at 0."
    if first is not None and op in _DOMAIN:
        return lambda names, _dtype: (
            f" {_named(names, 0)} leaves the function's domain: clamp it to [-1 + 1e-7, 1 - 1e-7]."
        )
    if op in _OVERFLOWING:
        return lambda _names, dtype: (
            f" The values overflow {dtype}: scale them down (subtract the max before `exp`)"
            + (
                ", stay in log space, or compute in float32."
                if "16" in dtype
                else " or stay in log space."
            )
        )
    return _no_hint


_OVERFLOWING = frozenset(
    ("exp", "pow", "mul", "matmul", "mm", "bmm", "sum", "add", "square", "cumprod", "prod")
)


def _named(names: list[str], at: int) -> str:
    return names[at] if at < len(names) else "an input"


_profiling: Any = getattr(torch.autograd, "_profiler_enabled", lambda: False)


def _no_hint(_names: list[str], _dtype: str) -> str:
    return ""


def _unseen(tensors: list[Any]) -> Any:
    """Reads of plain tensors kept from the program's dispatch modes (a logging mode, a
    FlopCounterMode); others (the stand-in accelerator dispatches in Python) as they are."""
    if all(type(t) in _PLAIN for t in tensors):
        return torch._C._DisableTorchDispatch()
    return contextlib.nullcontext()


def _holds(tensor: Any, condition: Any) -> bool:
    """Whether any element meets ``condition`` (False for a tensor type that cannot say)."""
    try:
        return bool(condition.any())
    except Exception:
        return False


# -- NaN/Inf born in backward ----------------------------------------------------------------
#
# A forward whose values are all finite can still make a non-finite gradient: sqrt at 0 (a
# distance between equal points, a padding row), x ** 0.5, a norm of a zero vector, log at 0,
# acos at 1. ``loss.backward()`` then writes Inf/NaN into ``.grad`` and ``optimizer.step()`` into
# the weights, and the first NaN forward op the rule sees has NaN inputs: nothing to report.
# So, while the rule is on, each backward call (``before``) hooks the nodes of its graph; a node
# whose computed gradient is not finite though the gradient it received was is where the NaN
# was born, reported (``after``) at the forward line that created the node (its Prov, stamped
# by the engine on the nodes of sampled ops), else at the backward call naming the node.
# Cost: one walk of the graph and a finiteness check of each node's gradients per backward —
# no forward traceback per op as ``torch.autograd.detect_anomaly`` records; nothing when off.

#: graph nodes hooked per backward call at most (nearest the loss first)
MAX_NODES = 20_000

_SESSIONS = "nan-inf.backward"


class _Backward:
    """The hooks of one backward call and the first node seen making a non-finite gradient."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.handles: list[Any] = []
        self.open = True
        #: (node, NaN count, Inf count) of the first node that made a non-finite gradient
        self.first: Optional[tuple[Any, int, int]] = None
        self.others = 0
        #: the backward starts at a loss a ``GradScaler`` scaled
        self.scaled = False

    def check(self, index: int, grad_inputs: Any, grad_outputs: Any) -> None:
        if not self.open:
            return
        try:
            made = [g for g in grad_inputs if isinstance(g, _Tensor)]
            if all(_finite(g) is not False for g in made):
                return
            received = [g for g in grad_outputs if isinstance(g, _Tensor)]
            if not all(_finite(g) is True for g in received):
                return  # passed along (or cannot tell)
            node = self.nodes[index]
            if node.metadata.get(_REPORTED):  # the forward check reported its output
                return
            if not _saved_finite(node):
                return  # its forward already saw NaN/Inf: the forward check reported that
            if self.first is not None:
                self.others += 1
                return
            nans = infs = 0
            with torch._C.DisableTorchFunction():
                for g in made:
                    for part in _parts(g) or ():
                        nans += int(torch.isnan(part).sum())
                        infs += int(torch.isinf(part).sum())
            self.first = (node, nans, infs)
        except Exception:  # a gradient it cannot read: this node is not judged
            return

    def close(self) -> None:
        self.open = False
        for handle in self.handles:
            with contextlib.suppress(Exception):
                handle.remove()
        self.handles.clear()
        self.nodes = []


def _saved_finite(node: Any) -> bool:
    """Whether the tensors ``node`` saved in forward (its inputs or result) are finite, as far as
    can be told (read in its hook: they are freed once backward is past it)."""
    saved: list[Any] = []
    for name in saved_attribute_names(node):
        try:
            value = saved_value(node, name)
        except Exception:
            continue
        saved.extend(value if isinstance(value, (list, tuple)) else (value,))
    if not saved:  # a custom autograd.Function keeps them here
        saved.extend(getattr(node, "saved_tensors", None) or ())
    return all(_finite(t) is not False for t in saved if isinstance(t, _Tensor))


#: rule_state key: (id of the last in-place op's target, whether it was finite before the op)
_TARGET_BEFORE = "nan-inf.inplace-target"


def before(op: OpInfo, args: Args, kwargs: Kwargs, caller: Any, state: Any) -> None:
    """Hook the graph of this backward call (removed in ``after``); for an in-place op,
    whether its target is finite before it writes."""
    if not op.backward:
        target = args[0] if args else None
        if isinstance(target, _Tensor) and torch._C._get_tracing_state() is None:
            try:
                finite = _finite(target)
            except Exception:  # a tensor type that cannot be judged: not this op
                finite = None
            state.rule_state[_TARGET_BEFORE] = (id(target), finite)
        return None
    sessions = state.rule_state.setdefault(_SESSIONS, {})
    thread = threading.get_ident()
    stale = sessions.pop(thread, None)
    if stale is not None:  # the previous backward of this thread raised: its after never ran
        stale.close()
    if _profiling():  # (the program's profile would count the gradients' checks as its ops)
        return None
    session = _Backward()
    sessions[thread] = session
    roots = [graph_node(t) for t in backward_targets(op, args, kwargs) if graph_node(t) is not None]
    session.scaled = _scaled(roots)
    seen = set(roots)
    queue = deque(roots)
    nodes = session.nodes
    while queue and len(nodes) < MAX_NODES:
        node = queue.popleft()
        if not accumulates_grad(node):  # a leaf's computes no gradient
            index = len(nodes)
            nodes.append(node)
            session.handles.append(node.register_hook(partial(session.check, index)))
        for parent, _ in node.next_functions:
            if parent is not None and parent not in seen:
                seen.add(parent)
                queue.append(parent)
    return None


def _backward_done(caller: Any, state: Any) -> Optional[Report]:
    session = state.rule_state.get(_SESSIONS, {}).pop(threading.get_ident(), None)
    if session is None:
        return None
    found, others = session.first, session.others
    session.close()
    left_to_the_scaler = _left_to_the_scaler(session, state)
    if found is None:
        return None
    node, nans, infs = found
    kind = node.name()
    user = frames.user_frame(caller)
    prov = _forward_line(node, kind, user, state)  # (remembered while the scaler is waited on)
    if left_to_the_scaler:
        return None
    backward_text = naming.expression_text(user) if user is not None else "backward()"
    backward_at = f"{os.path.basename(user.f_code.co_filename)}:{user.f_lineno}" if user else ""
    if prov is not None:
        # (both places: a debugger stops at the live one, the backward call)
        where = (
            f"backward of {prov.op} at {prov.where()}, run by `{backward_text}` at {backward_at}"
        )
    else:
        where = "created by an op whose line was not recorded"
    also = f" ({others} more node(s) did too)" if others else ""
    scaled = (
        f" It happened in {SCALER_GIVES_UP} scaled backward() calls in a row: GradScaler "
        "skipped each step and lowered its scale, so the scale is not the cause."
        if session.scaled
        else ""
    )

    def build(described: list[Any], expression: str) -> str:
        return (
            f"`{expression}`: the gradient computed by {kind} ({where}) has {nans} NaN and "
            f"{infs} Inf values though its incoming gradient and forward values were "
            f"finite{also}: .grad gets them, the weights at the next optimizer step.{scaled} "
            f"{_hint(kind)}."
        )

    at = (prov.path, prov.line) if prov is not None else None
    return Report(tensors=[], message=build, operands=False, at=at)


_FORWARD_LINES = "nan-inf.forward-lines"


def _forward_line(node: Any, kind: str, user: Any, state: Any) -> Any:
    """Where ``node`` was made (its Prov), or ``None``. Only the first runs of a line are
    recorded; a loop that makes the same bad gradient at every step keeps its first steps'
    answer, by backward call line and node kind, so each report names the forward line."""
    prov = node.metadata.get(NODE_PROV_KEY)
    if user is None:
        return prov
    known: dict[tuple[str, int, str], Any] = state.rule_state.setdefault(_FORWARD_LINES, {})
    key = (user.f_code.co_filename, user.f_lineno, kind)
    if prov is None:
        return known.get(key)
    known[key] = prov
    return prov


#: node name prefix -> what makes its derivative infinite, and the usual fix
_HINTS = (
    ("Sqrt", "Sqrt's derivative is infinite at 0: add an eps inside it, torch.sqrt(x + eps)"),
    ("Rsqrt", "Rsqrt's derivative is infinite at 0: add an eps, torch.rsqrt(x + eps)"),
    ("Pow", "x ** p with p < 1 has an infinite derivative at x = 0: add an eps to the base"),
    (
        "LinalgVectorNorm",
        "A norm's derivative is undefined at the zero vector: add an eps, "
        "torch.sqrt((x ** 2).sum(-1) + eps)",
    ),
    ("Norm", "A norm's derivative is undefined at the zero vector: add an eps"),
    ("Cdist", "Cdist's derivative is undefined at distance 0: add an eps to the distances"),
    ("Div", "The divisor is 0 (or tiny) somewhere: clamp it away from 0"),
    ("Log", "Log's derivative is infinite at 0: clamp its input, x.clamp_min(eps)"),
    ("Acos", "Acos' derivative is infinite at ±1: clamp its input to [-1 + eps, 1 - eps]"),
    ("Asin", "Asin's derivative is infinite at ±1: clamp its input to [-1 + eps, 1 - eps]"),
    ("Atan2", "Atan2's derivative is undefined at (0, 0): add an eps"),
    ("Std", "Std's derivative is infinite when all values are equal: add an eps to the variance"),
)


def _hint(kind: str) -> str:
    for prefix, hint in _HINTS:
        if kind.startswith(prefix):
            return hint
    return "Its derivative is infinite or undefined at some of its input values"


def install(state: Any) -> list[Any]:
    """A backward that raised keeps its hooks until the next backward of its thread; the watch
    ending removes them."""

    class _Sessions:
        def remove(self) -> None:
            for session in state.rule_state.pop(_SESSIONS, {}).values():
                session.close()

    return [_Sessions()]
