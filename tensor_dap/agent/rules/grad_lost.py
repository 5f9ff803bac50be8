"""``grad-lost``: ``backward()`` on a tensor that has no gradient history.

PyTorch raises "element 0 of tensors does not require grad and does not have a grad_fn" and
says nothing of why. Reported at the ``backward()`` line before that happens, naming the line
where the history was cut (``.detach()``, ``.data``, re-wrapping with ``torch.tensor``, an op
under ``no_grad``) — or, when nothing it came from ever required grad, the tensors it was
computed from and where they were created.

It goes one step further at ``optimizer.step()``: a parameter that took part in this step's
forward (an op with grad enabled used it) but got no gradient, when a tensor whose history was
cut went on into the graph after that use (``self.fc2(h.detach())``), had its history cut inside
the forward — a silent bug PyTorch never reports. The cut is named; one through NumPy or Python
(``torch.from_numpy(np.clip(h.detach().numpy(), ...))``, ``torch.tensor(h.tolist())``) is
followed by what was handed out after the use. A parameter whose output was simply left out of
the loss (the heads a winner-takes-all loss did not pick, a multi-task head without a target
this step, an unused pooler) is not that bug and is not reported; nor is a layer only ever
written through ``.data`` by an initialisation. And a ``zero_grad()`` between ``backward()``
and ``step()``, which erases every gradient of the step, is reported there
(:mod:`tensor_dap.agent.rules._zeroed_before_step`). Learned from sampled ops (their keyword
arguments too: ``F.layer_norm`` passes its weight as one), so it looks at the first steps of
each loop, which is where such a bug shows.
"""

from __future__ import annotations

import ast
import collections
from types import FrameType
from typing import Any, Iterable, Optional

import torch

from tensor_dap import catalog
from tensor_dap.agent import frames, grad_scaler, module_zero_grad, naming, optimizers
from tensor_dap.agent.graph_nodes import graph_node
from tensor_dap.agent.graph_walk import upstream_leaves
from tensor_dap.agent.lineage import NO_GRADIENT, argument_items
from tensor_dap.agent.no_grad_source import block_statements
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.optimizers import Subscriber
from tensor_dap.agent.provenance import (
    CLOCK,
    REWRAPS,
    Prov,
    address_of,
    first_cut,
    rewrapped,
    roots,
    untracked_input,
)
from tensor_dap.agent.rules import (
    Report,
    _constant_terms,
    _frozen_derivatives,
    _penalty_as_number,
    _remade_parameters,
    _step,
    _trained_under_no_grad,
    _updated_by_hand,
    _zeroed_before_step,
)
from tensor_dap.agent.rules.hooks import Args, Kwargs, RuleState
from tensor_dap.agent.tensor_map import TensorMap

RULE = catalog.rule("grad-lost")

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter


def applies_before(op: OpInfo) -> bool:
    return op.backward


def applies(op: OpInfo) -> bool:
    """``after`` runs on in-place scalings (a zero_grad's zeros clipped or unscaled), and on
    ``torch.autograd.grad`` (:mod:`._penalty_as_number`)."""
    return op.name in _zeroed_before_step.SCALINGS or (op.backward and op.name == "grad")


def applies_passthrough(op: OpInfo) -> bool:
    """``p.data = value``: a parameter the program updates by hand (BYOL's EMA target written
    ``ma.data = beta * ma.data + ...``), seen by ``before``."""
    return op.name == _updated_by_hand.DATA_SET


def after(op: OpInfo, args: Args, kwargs: Kwargs, out: Any, caller: Any, state: Any) -> Any:
    if op.backward:
        _penalty_as_number.made(args, kwargs, out, caller, state)
    elif not op.passthrough:
        _zeroed_before_step.scaled(args, state)


def backward_targets(op: OpInfo, args: Args, kwargs: Kwargs) -> list[Any]:
    """The tensors backward starts from: ``self``, ``tensors`` or ``outputs``."""
    first: Any = args[0] if args else None
    if first is None and kwargs:
        first = kwargs.get("tensors", kwargs.get("outputs"))
    if isinstance(first, _Tensor):
        return [first]
    if isinstance(first, (list, tuple)):
        return [t for t in first if isinstance(t, _Tensor)]
    return []


def before(op: OpInfo, args: Args, kwargs: Kwargs, caller: Any, state: Any) -> Any:
    if op.passthrough:  # (`p.data = value`: see applies_passthrough)
        _updated_by_hand.data_set(args, caller, state)
        return None
    _zeroed_before_step.on_backward(state, caller)
    targets = backward_targets(op, args, kwargs)
    leaves = bool(targets) and all(graph_node(t) is None for t in targets)
    previous = _trained_under_no_grad.last_backward(state)
    _trained_under_no_grad.on_backward(state, from_leaves=leaves)
    constant = _constant_terms.check(targets, caller, state)
    if constant is not None:
        return constant
    frozen = _frozen_derivatives.check(targets, caller, state)
    if frozen is not None:
        return frozen
    for tensor in targets:
        if not tensor.requires_grad:
            prov = state.provenance.lookup(tensor)
            reads = tuple(state.rule_state.get(_HANDED, ()))
            return Report(tensors=[tensor], message=_explain(prov, reads))
        if graph_node(tensor) is None:  # a leaf: backward() reaches nothing but itself
            prov = state.provenance.lookup(tensor)
            cut = first_cut(prov) if prov is not None else None
            if cut is not None:  # re-made of a graph's values: torch.tensor(loss.item(), ...)
                return Report(tensors=[tensor], message=_leaf_message(prov, cut))
            # (a re-made loss is one number; autograd tutorials' leaves of data are not)
            handed = _handed_before(prov, previous, state) if tensor.numel() == 1 else None
            if handed is not None:  # (of numbers the engine cannot follow: a sum of .item()s)
                return Report(tensors=[tensor], message=_leaf_message(prov, handed))
    _penalty_as_number.backward(targets, state)
    return None


def _handed_before(prov: Optional[Prov], since: int, state: Any) -> Optional[Prov]:
    """For a leaf made of Python data (``torch.tensor(sum(w * v.item() ...),
    requires_grad=True)``): the values read out of a graph (``.item()``) since the backward
    before, ahead of the leaf, if any; autograd's tutorial's leaves of plain data are no
    re-made loss."""
    if prov is None or prov.op not in REWRAPS:
        return None
    recent = state.rule_state.get(_HANDED, ())
    return next((cut for when, cut in reversed(recent) if since < when < prov.made), None)


def _leaf_message(prov: Prov, cut: Prov) -> Any:
    """A loss re-made as a new leaf (``torch.tensor(loss.item(), requires_grad=True)``):
    backward() runs without an error and no parameter gets a gradient."""

    def build(described: list[Any], expression: str) -> str:
        name = described[0].name
        same_line = (cut.path, cut.line) == (prov.path, prov.line)
        read_at = "there" if same_line else f"at {_where(cut)}"
        return (
            f"`{expression}`: {name} is a new leaf tensor (made at {_where(prov)} by "
            f"{prov.op}), so backward() reaches no parameter: nothing trains. Its values were "
            f"read out of the graph {read_at} by {cut.cut}; requires_grad=True does not "
            f"bring the history back. Call backward() on the loss tensor itself."
        )

    return build


#: rule_state key: parameter -> its use (a TensorMap)
_USED = "grad-lost.used-params"
#: a parameter's use: when (in the order of provenance's ``CLOCK``), where, and whether the op
#: built a graph (a use that did, ``self.fc1(x)``, is kept over one that did not,
#: ``self.fc1.weight.data``; the latest such use counts: a GAN's generator runs for the critic's
#: step, whose ``G(z).detach()`` is right, then for its own)
_Use = tuple[int, Prov, bool]
#: rule_state key: the newest cuts whose tensors went on into an op that builds a graph,
#: as (when, the cut's Prov)
_REJOINED = "grad-lost.rejoined-cuts"
#: rule_state key: the newest tensors whose history was cut handed to NumPy or Python
#: (``h.detach().numpy()``, ``.tolist()``, ``.item()``), as (when, the cut's Prov), newest
#: last: what a tensor the watch did not see made (``torch.from_numpy(np.clip(array, ...))``)
#: may come from; a loss re-made of numbers read before the ones logged after it
#: (:func:`_handed_before`)
_HANDED = "grad-lost.handed-out"
_HAND_OUTS = frozenset({"numpy", "tolist", "item"})
#: rule_state key: parameter -> (its use, the cut) when a step found it without gradient
#: (reported from the second: an EMA teacher's first by-hand update comes after the first step)
_MISSING_BEFORE = "grad-lost.missing-before"
#: rejoined cuts kept (the newest)
_KEPT_CUTS = 8


def observe(op: OpInfo, args: Args, out: Any, caller: Any, state: Any) -> None:
    """Remember parameters used by ops that build a graph (grad enabled), and cut tensors that
    go on into such an op (``self.fc2(h.detach())``): a parameter without gradient at the step
    is reported only when its history was cut after it was used, not when its output was
    simply left out of the loss (a head a winner-takes-all loss did not pick)."""
    if op.name in _HAND_OUTS:
        _note_hand_out(op, args, caller, state)
        return
    if op.name == "__float__":  # (`float(penalty)`: only a create_graph penalty's is followed)
        if args and isinstance(args[0], _Tensor) and args[0].requires_grad:
            _penalty_as_number.handed_out(args[0], op.name, caller, state)
        return
    if not torch.is_grad_enabled():
        _trained_under_no_grad.observe(args, caller, state)
        _updated_by_hand.observe(op, args, caller, state)
        return
    if op.backward:  # (torch.autograd.grad(loss, params): the params' inputs, not a use)
        if op.name == "grad":
            _frozen_derivatives.note_grad(args, out, caller, state)
        return
    used: Optional[TensorMap[_Use]] = None
    builds = _builds_graph(out)
    cut_inputs = False
    # (lists too: nn.GRU/LSTM hand torch their weights as one, _VF.gru(x, h, _flat_weights))
    for item in argument_items(args):
        if not isinstance(item, _Tensor):
            continue
        if not item.requires_grad:
            cut_inputs = True
        # (a leaf that requires grad: a Parameter, or a raw weight `torch.randn(..., requires_grad
        # =True)` an optimizer steps; is_leaf is read in C, Parameter's isinstance in Python)
        elif item is not out and item.is_leaf:  # (not nn.init's fill-ins)
            # (a plain tensor's: maybe a cut made a leaf again, `.detach().requires_grad_()`)
            cut_inputs = cut_inputs or type(item) is _Tensor
            if used is None:
                used = state.rule_state.get(_USED)
                if used is None:
                    used = state.rule_state[_USED] = TensorMap()
            known = used.get(item)
            if known is None or builds:  # (the latest use that built a graph: this step's)
                user = frames.user_frame(caller)
                if user is not None:
                    where = Prov(user.f_code.co_filename, user.f_lineno, op.name)
                    used.set(item, (next(CLOCK), where, builds))
    if cut_inputs and builds:
        _note_rejoined_cuts(args, state)
        _constant_terms.observe(op.name, args, out, caller, state)
        _frozen_derivatives.observe(op.name, args, out, caller, state)


def _builds_graph(out: Any) -> bool:
    if isinstance(out, _Tensor):
        return bool(out.requires_grad)
    if out.__class__ is tuple:  # torch._VF.lstm, torch.split
        return any(isinstance(item, _Tensor) and item.requires_grad for item in out)
    return False


def _note_rejoined_cuts(args: Args, state: Any) -> None:
    """Remember the cut behind each input without history that had one."""
    provenance = state.provenance
    for item in argument_items(args):
        if not isinstance(item, _Tensor):
            continue
        if item.requires_grad:  # a cut made a leaf again (`.detach().requires_grad_()`)?
            prov = provenance.lookup(item) if item.is_leaf and type(item) is _Tensor else None
            cut = prov.cut_at if prov is not None else None
            if cut is not None and cut.cut_site is None:  # (written: not a no_grad block's)
                kept = state.rule_state.setdefault(_REJOINED, collections.deque(maxlen=_KEPT_CUTS))
                kept.append((next(CLOCK), cut))
            continue
        prov = provenance.lookup(item)
        if prov is None:  # made where the watch does not see: torch.from_numpy(array)
            prov = provenance.lookup_array(address_of(item))
        if prov is not None and prov.cut_at is not None:
            rejoined = (next(CLOCK), prov.cut_at)
        else:  # made of what was handed out? (as_tensor(np.clip(array)), from_numpy().to()
            # and a Tanh, the next module's first layer)
            handed = state.rule_state.get(_HANDED)
            if not handed or prov is None or prov.made < handed[-1][0]:
                continue  # (a batch or target made before the hand-out is no evidence)
            rejoined = handed[-1]
            if not (_moved_unseen(prov, rejoined[0]) or _rewrapped(prov)):
                continue
        kept = state.rule_state.setdefault(_REJOINED, collections.deque(maxlen=_KEPT_CUTS))
        kept.append(rejoined)


#: records looked through, back from an input, for the tensor made of what was handed out
_REWRAP_GENERATIONS = 4


#: ops that move or convert a tensor (the re-made one: ``torch.from_numpy(...).to(device)``)
_CONVERSIONS = frozenset({"to", "cuda", "float", "double", "half", "type", "contiguous"})


def _moved_unseen(prov: Prov, since: int) -> bool:
    """Whether ``prov`` was made of a tensor the watch never saw made, after ``since``: its own
    input, or a few records back a conversion's (``torch.from_numpy(np.tanh(...)).to(device)``
    and a Tanh). Further back, an input without a record is more likely one the sampling of a
    busy line left out than a re-made one."""
    origin = untracked_input(prov, limit=_REWRAP_GENERATIONS)
    if origin is None or origin.made < since:
        return False
    return origin is prov or origin.op in _CONVERSIONS


def _rewrapped(prov: Prov) -> bool:
    """Whether ``prov`` runs back to a tensor made of NumPy or Python data."""
    return rewrapped(prov, limit=_REWRAP_GENERATIONS)


def _note_hand_out(op: OpInfo, args: Args, caller: Any, state: Any) -> None:
    """A tensor whose history is cut handed to NumPy or Python: the cut, to :data:`_HANDED`.
    It counts for a parameter used before it (see :func:`_params_without_grad`): a number
    logged after the step's backward is no evidence for the next step's forward."""
    tensor = args[0] if args else None
    if not isinstance(tensor, _Tensor):
        return
    if tensor.requires_grad:  # cut right here: h.tolist(), loss.item()
        _penalty_as_number.handed_out(tensor, op.name, caller, state)
        user = frames.user_frame(caller)
        if user is None:
            return
        how = f"{op.name}(), whose Python numbers keep no gradient history"
        # (the parameters upstream, as for a `.detach()`: of two numbers read out, an actor's
        # `log_prob.item()` re-made into the loss and a critic's `value.item()` for its
        # advantage, the one that cut the parameters left without gradient is named; sampled
        # as every observed op, and bounded by UPSTREAM_LIMIT nodes)
        upstream = upstream_leaves([tensor])
        cut: Optional[Prov] = Prov(
            user.f_code.co_filename, user.f_lineno, op.name, how, upstream=upstream
        )
    else:
        prov = state.provenance.lookup(tensor)
        cut = prov.cut_at if prov is not None else None
    if cut is not None:
        handed = state.rule_state.setdefault(_HANDED, collections.deque(maxlen=_KEPT_CUTS))
        handed.append((next(CLOCK), cut))


def install(state: RuleState) -> list[Any]:
    """At each ``optimizer.step()``: the gradients a ``zero_grad()`` erased after this step's
    backward (:mod:`._zeroed_before_step`), else the parameters a cut left without one."""

    def check(optimizer: Any, caller: FrameType) -> Optional[Report]:
        erased = _zeroed_before_step.check(optimizer, caller, state)
        if erased is not None:
            return erased
        penalty = _penalty_as_number.at_step(optimizer, caller, state)
        if penalty is not None:
            return penalty
        used = state.rule_state.get(_USED)
        untrained = _trained_under_no_grad.check(optimizer, caller, state, used)
        if untrained is not None:
            return untrained
        # (run either way: it takes this step's uses; but a backward() that reached no graph
        # left every parameter without gradient, and its own finding, a loss re-made of
        # numbers, says why: the step's would say it again)
        without = _params_without_grad(optimizer, state, caller)
        return None if _trained_under_no_grad.from_leaves(state) else without

    def zeroed(optimizer: Any) -> None:
        try:
            _zeroed_before_step.zeroed(state, optimizer)
        except Exception:
            state._rule_failed(RULE.id)

    def zeroing(optimizer: Any) -> None:
        try:
            _zeroed_before_step.zeroing(state, optimizer)
        except Exception:
            state._rule_failed(RULE.id)

    def module_zeroed(module: Any, caller: FrameType) -> None:
        try:
            _zeroed_before_step.module_zeroed(state, module, caller)
        except Exception:
            state._rule_failed(RULE.id)

    before_step = _step.before_step(RULE.id, state, check)

    def erased(optimizer: Any, caller: FrameType) -> Optional[Report]:
        return _zeroed_before_step.check(optimizer, caller, state, failing=True)

    # (a GradScaler's step raises before optimizer.step() when it finds no gradient: the check
    # runs as it finds none)
    nothing_to_unscale = _step.before_step(RULE.id, state, erased)

    return [
        optimizers.subscribe(Subscriber(before_step=before_step, zeroed=zeroed, zeroing=zeroing)),
        module_zero_grad.subscribe(module_zeroed),
        grad_scaler.subscribe(nothing_to_unscale),
    ]


def _params_without_grad(optimizer: Any, state: Any, caller: FrameType) -> Optional[Report]:
    """The parameters a forward used whose history was cut after that use, at their second
    step without gradient (the first is kept: the program may update them by hand after it, as
    an EMA teacher's are), unless the program updates them by hand or replaced them in their
    module (:func:`_replaced_in_their_modules`)."""
    used = state.rule_state.get(_USED)
    # (each table's emptiness read once: a TensorMap's len() is a Python call)
    using = used if used else None
    pending: Optional[TensorMap[tuple[Prov, Prov]]] = state.rule_state.get(_MISSING_BEFORE)
    pending = pending if pending else None
    if using is None and pending is None:
        return None
    rejoined = state.rule_state.get(_REJOINED, ())
    missing: list[tuple[Any, tuple[Prov, Prov]]] = []
    unseen: list[Any] = []
    cuts: list[Prov] = []
    lacking: list[tuple[Any, Optional[int]]] = []
    for group in optimizer.param_groups:
        for param in group["params"]:
            use = using.pop(param, None) if using is not None else None
            if param.grad is not None:
                if pending is not None:
                    pending.pop(param)
                continue
            cut = _cut_after(use, rejoined, id(param)) if use is not None else None
            before = pending.get(param) if pending is not None else None
            by_hand = None
            if use is not None or before is not None:
                by_hand = _updated_by_hand.updated_by_hand(param, state)
                if not by_hand:
                    lacking.append((param, use[0] if use is not None else None))
            if cut is None and before is None:  # (an output left out of the loss: no cut)
                continue
            if by_hand:  # (an EMA teacher, a codebook)
                continue
            # (the first step's: its lines were followed in full, later ones are sampled)
            found = before if before is not None or use is None or cut is None else (use[1], cut)
            if found is None:
                continue
            if before is None:  # (its first: the program may update it by hand after it)
                if pending is None:
                    pending = state.rule_state[_MISSING_BEFORE] = TensorMap()
                pending.set(param, found)
                continue
            if use is None:  # (kept from an earlier step: not seen used in this one)
                unseen.append(param)
            missing.append((param, found))
    # (a name re-bound to a new leaf the forward used instead: that is the cause, whatever cut
    # was seen; and at once, the old parameter will never get a gradient again)
    remade = _remade_parameters.find(optimizer, lacking, used, caller, state) if lacking else []
    if remade:
        name = naming.object_name(frames.user_frame(caller), optimizer) or "optimizer"
        return Report(
            tensors=[p for p, _, _ in remade[:4]],
            message=_remade_parameters.message(name, remade, caller),
            operands=False,
        )
    if unseen:
        replaced = _replaced_in_their_modules(optimizer, unseen, caller)
        missing = [(p, found) for p, found in missing if not replaced.get(p, False)]
    for _, (_, cut) in missing:
        if all(cut is not c for c in cuts):
            cuts.append(cut)
    if not missing:
        return None
    return Report(
        tensors=[p for p, _ in missing[:4]],
        message=_no_grad_message(len(missing), [w for _, (w, _) in missing[:4]], cuts),
        operands=False,
    )


def _replaced_in_their_modules(optimizer: Any, params: list[Any], caller: FrameType) -> Any:
    """Those of ``params`` (of ``optimizer``) that no module the stepping code sees holds any
    more, while it holds others of the optimizer's: replaced by the program after the optimizer
    took them (a VQ-VAE's codebook re-made each forward, ``self._embedding.weight =
    nn.Parameter(...)``, zalandoresearch/pytorch-vq-vae), so no forward uses them. A TensorMap
    of them (weakly); empty when those modules hold none of the optimizer's (a trainer's model
    out of sight: not judged)."""
    held: set[int] = set()
    for module in naming.modules_in_sight(frames.user_frame(caller)):
        held.update(id(p) for p in module.parameters())
    replaced: TensorMap[bool] = TensorMap()
    owned = [p for group in optimizer.param_groups for p in group["params"]]
    if any(id(p) in held for p in owned):
        for param in params:
            if id(param) not in held:
                replaced.set(param, True)
    return replaced


def _cut_after(use: _Use, rejoined: Iterable[tuple[int, Prov]], param: int) -> Optional[Prov]:
    """The cut, among those that rejoined a graph, that explains ``use`` of the parameter
    ``id()`` ``param`` getting no gradient: one after it whose tensor that use fed (where known:
    a distillation target ``teacher(x).detach()`` cuts the teacher's history, not the
    student's unused head's), for a use in a graph (``self.fc1(x)``); for a use that is a cut
    itself (``self.g.data``: the parameter's own ``.data`` or ``.detach()``), that very cut
    going on into a graph — not the ``.data`` an initialisation wrote through."""
    when, where, builds = use
    found = None
    for at, cut in rejoined:
        if at <= when or (cut.upstream is not None and param not in cut.upstream):
            continue
        if builds or (cut.line == where.line and cut.path == where.path):
            if not cut.cut or not cut.cut.endswith(NO_GRADIENT):
                return cut
            found = found or cut
    # (an op without gradient, as the argmin choosing a VQ layer's codes, is a cut programs mean
    # more often than a written one: named only when no `.detach()`, `.data`... matches)
    if found is None and builds:
        found = _sampled_cut_of(rejoined, param)
    return found


def _sampled_cut_of(rejoined: Iterable[tuple[int, Prov]], param: int) -> Optional[Prov]:
    """A written cut of the parameter's own history (``param`` among its upstream) that went on
    into a graph, seen before its latest recorded use: ops are sampled per line (the first 8,
    then one in 64), so the use recorded last may be one whose cut was not (MAML's meta-batch:
    the fourth task's forward is seen, not the ``.detach()`` after it; the first task's, on the
    same line, was). Newest first."""
    for _, cut in reversed(list(rejoined)):
        written = cut.cut and not cut.cut.endswith(NO_GRADIENT)
        if written and cut.upstream is not None and param in cut.upstream:
            return cut
    return None


def _no_grad_message(count: int, wheres: list[Optional[Prov]], cuts: list[Prov]) -> Any:
    def build(described: list[Any], expression: str) -> str:
        parts = []
        for d, where in zip(described, wheres):
            used_at = f" (used at {where.where()} by {where.op})" if where else ""
            parts.append(f"{d.name} {d.shape_text}{used_at}")
        if count > len(parts):
            parts.append(f"and {count - len(parts)} more")
        named = " or ".join(f"{_where(c)} by {c.cut}" for c in cuts[:2])
        instead = _unwrapped(cuts[0]) if len(cuts) == 1 else None
        fix = (
            _unwrapped_fix(instead)
            if instead
            else "Keep the tensors between that use and the loss in the graph."
        )
        return (
            f"`{expression}`: {count} parameter(s) took part in this step's forward but got no "
            f"gradient: {', '.join(parts)}. Their history was cut after that use, at {named}. "
            f"{fix}"
        )

    return build


def _where(prov: Prov) -> str:
    return naming.place(prov.path, prov.line)


def _explain(prov: Optional[Prov], handed: tuple[tuple[int, Prov], ...] = ()) -> Any:
    """``handed``: the newest reads out of a graph (:data:`_HANDED`), for a Python number the
    cut's line uses (:func:`_number_read_out`)."""

    def build(described: list[Any], expression: str) -> str:
        name = described[0].name
        head = f"`{expression}`: {name} has no grad_fn and does not require grad"
        if prov is None:
            return head + "; it was created outside the watched code, so its origin is unknown."
        cut = first_cut(prov)
        if cut is not None and cut.cut_site is not None:
            site = Prov(*cut.cut_site, op="")
            # (the block's other lines: the one meant to train may be among them, unsampled)
            others = [n for n in block_statements(*cut.cut_site) if n != cut.line]
            also = "".join(f" and {naming.place(cut.path, n)}" for n in others[:2])
            also += f" and {len(others) - 2} more lines" if len(others) > 2 else ""
            return (
                f"{head}: its gradient history was cut at {_where(site)}, which turns "
                f"gradients off around {_where(cut)} ({cut.op} ran without recording them)"
                f"{also}. Compute {name} outside that block, or remove it where gradients are "
                "needed."
            )
        if cut is not None and cut.op == "grad":  # torch.autograd.grad(..., create_graph=False)
            return (
                f"{head}: it was computed at {_where(cut)} by torch.autograd.grad without "
                "create_graph=True, which returns gradients with no history of their own. Pass "
                "create_graph=True there to differentiate them again (a second derivative, a "
                "gradient penalty)."
            )
        number = _number_read_out(cut, handed) if cut is not None else None
        if cut is not None and number is not None:
            used, read, tensor = number
            return (
                f"{head}: its gradient history was cut at {_where(cut)} by {cut.cut}, and "
                f"`{used}` there is a Python number, read out of the graph by .item() at "
                f"{_where(read)}: a number carries no gradient. Use the tensor `{tensor}` in "
                f"place of `{used}` there (the {cut.cut} can stay if it is meant)."
            )
        instead = _unwrapped(cut) if cut is not None else None
        if cut is not None and instead is not None:
            return (
                f"{head}: its gradient history was cut at {_where(cut)} by {cut.cut}. "
                f"{_unwrapped_fix(instead)}"
            )
        if cut is not None:
            return (
                f"{head}: its gradient history was cut at {_where(cut)} by {cut.cut}. "
                f"Compute {name} from tensors that keep their grad_fn there."
            )
        gap = untracked_input(prov)
        if gap is not None:
            return (
                f"{head}. Its history runs back to {_where(gap)}, whose input tensor tensor-dap "
                "did not record (the line that made that input ran many times, and a line is "
                "followed in full for its first 8 runs, then one run in 64). Look "
                "upstream of it for where the graph is cut: .detach(), .data, torch.tensor(...), "
                ".item()/.tolist(), or an op under torch.no_grad()."
            )
        sources = []
        for root in roots(prov):
            label = naming.assignment_target(root.path, root.line) or "a tensor"
            sources.append(f"{label} (created at {root.where()} by {root.op})")
        listed = ", ".join(sources) if sources else f"its inputs at {prov.where()}"
        return (
            f"{head}: nothing it was computed from requires grad: {listed}. "
            "Create the tensors to train with requires_grad=True (or make them nn.Parameters)."
        )

    return build


#: how re-wrapping calls read (``torch.tensor(losses)``, ``torch.as_tensor([a, b])``)
_REWRAPS = frozenset({"torch.tensor", "torch.as_tensor", "tensor", "as_tensor"})


def _unwrapped(cut: Prov) -> Optional[str]:
    """What a cut made by re-wrapping tensors (``torch.tensor(task_losses, ...)``) should have
    been, at the cut's line: ``torch.stack(task_losses)`` for a list of tensors (by name or
    written out), ``l`` for one tensor by name (``torch.tensor(l, requires_grad=True)``); None
    for any other cut, or a re-wrap of numbers (``torch.tensor(loss.item())``)."""
    listed = cut.cut is not None and cut.cut.endswith("re-wrapping of a list")
    if cut.cut is None or not (listed or cut.cut.endswith("re-wrapping")):
        return None
    statement = naming.parsed_statement(naming.statement_text(cut.path, cut.line))
    for node in ast.walk(statement) if statement is not None else ():
        if isinstance(node, ast.Call) and node.args and ast.unparse(node.func) in _REWRAPS:
            values = node.args[0]
            if not listed:
                return values.id if isinstance(values, ast.Name) else None
            if isinstance(values, ast.Name) or (
                isinstance(values, (ast.List, ast.Tuple))
                and values.elts
                and not any(isinstance(v, ast.Constant) for v in values.elts)
                and not any(_reads_a_number(v) for v in values.elts)
            ):
                return f"torch.stack({ast.unparse(values)})"
    return None


def _unwrapped_fix(instead: str) -> str:
    """The advice for :func:`_unwrapped`'s expression."""
    if instead.startswith("torch.stack("):
        return (
            f"Build it with `{instead}` there: torch.tensor(...) copies the values into a new "
            "tensor without history, torch.stack keeps each one's graph."
        )
    return (
        f"Use `{instead}` itself there: torch.tensor(...) copies its values into a new tensor "
        "without history (requires_grad=True does not bring it back)."
    )


def _reads_a_number(node: ast.AST) -> bool:
    """``loss.item()``, ``float(x)``: an element that is a Python number, not a tensor."""
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Attribute) and node.func.attr in ("item", "tolist"):
        return True
    return isinstance(node.func, ast.Name) and node.func.id in ("float", "int")


def _number_read_out(
    cut: Prov, handed: tuple[tuple[int, Prov], ...]
) -> Optional[tuple[str, Prov, str]]:
    """A Python number the cut's line uses that ``.item()`` read out of a graph — SAC's
    ``alpha_loss = -(self.alpha * (logp + target).detach()).mean()`` with an ``alpha`` property
    returning ``self.log_alpha.exp().item()``: the ``detach()`` is meant, the number is the
    cut. (the name the line uses, where it was read, the tensor read), or None."""
    statement = naming.parsed_statement(naming.statement_text(cut.path, cut.line))
    if statement is None:
        return None
    used: dict[str, str] = {}
    for node in ast.walk(statement):
        if isinstance(node, ast.Name):
            used.setdefault(node.id, node.id)
        elif isinstance(node, ast.Attribute):
            used.setdefault(node.attr, ast.unparse(node))
    for _, read in reversed(handed):
        if read.op != "item":
            continue
        tensor = _item_receiver(read)
        target = naming.assignment_target(read.path, read.line) or _returned_by(read)
        name = target.rsplit(".", 1)[-1] if target else None
        if tensor is not None and name in used:
            return used[name], read, tensor
    return None


def _item_receiver(read: Prov) -> Optional[str]:
    """``self.log_alpha.exp()`` of the line ``... = self.log_alpha.exp().item()``."""
    statement = naming.parsed_statement(naming.statement_text(read.path, read.line))
    for node in ast.walk(statement) if statement is not None else ():
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "item"
        ):
            return ast.unparse(node.func.value)
    return None


def _returned_by(read: Prov) -> Optional[str]:
    """The function whose ``return`` is the line (a property's name: ``alpha``)."""
    tree = naming.module_tree(read.path)
    found: Optional[str] = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            returns = [
                r for r in ast.walk(node) if isinstance(r, ast.Return) and r.lineno == read.line
            ]
            if returns:
                found = node.name  # (the innermost: ast.walk goes outside in)
    return found
