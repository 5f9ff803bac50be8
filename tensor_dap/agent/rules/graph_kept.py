"""``graph-kept``: a tensor carrying autograd history is accumulated across loop iterations.

``total_loss += loss`` (the PyTorch FAQ's "my model uses more memory every iteration") makes
``total_loss`` the sum of every iteration's loss *with its graph*: the graph of each iteration
stays alive as long as the total does, and when no ``backward()`` ran through it (an evaluation
loop without ``torch.no_grad()``), so do all the activations it saved. The fix is to accumulate
a number (``loss.item()``) or a detached tensor (``loss.detach()``), or to run the loop under
``torch.no_grad()``.

What is seen is one add at one call site (``+=``, ``a + b``, ``torch.add``) of user code whose
result is a one-element tensor with a ``grad_fn``, whose graph links to the result the same
site made the time before (the result's node has the previous result's node as an input: a
*chain*), and whose other operand is a *fresh* graph: made after that previous add (its node's
sequence number is higher), which ``sum(list_of_losses)`` of losses made beforehand is not.
A chain is reported at its line, once it holds :data:`MIN_ITERATIONS` iterations, when

- a ``backward()`` went through one of its terms on its own (``loss.backward(); total +=
  loss``: the term's node was that backward's root, or its saved tensors were freed by a
  backward started from a tensor made of it, ``scaler.scale(loss).backward()``, or a hook on
  it says one ran through it later) and not through the chain (a hook on each node the chain
  grew by says when one does), and the chain grew again: the training-loop form.
  ``backward()`` calls of other graphs only (an actor-critic's critic stepping while the
  actor's loss sums over the episode) leave the chain to be judged when its graph goes;
- or it stopped growing and whole ``backward()`` calls ran after it without going through it,
  more than ran between two of its growths: the evaluation-loop form, reported at the chain's
  line when the next training step runs backward;
- or its graph was freed (its total dropped, and nothing made from it, such as ``total / n``,
  holding the graph) and no ``backward()`` had gone through it, nor through a chain this line
  made before: the evaluation loop no backward follows (the program's last evaluation, in
  training mode), reported then, in the frame running then (:mod:`graph_life` says when); a
  graph still alive when the program ends is reported then (:func:`finish`, ``tensor-dap
  check``);
- or, before any ``backward()``, the graphs it accumulates use only parameters of modules in
  eval mode (``model.eval()``), modules the accumulating frame names (a local or global
  variable, or an attribute of its ``self``, or ``self``): the evaluation-loop form again, as
  it grows, also when no backward follows (the last evaluation of a program), unless an
  optimizer's ``zero_grad()`` ran and its ``step()`` has not yet: a model fine-tuned in eval
  mode (dropout off, as RLHF code does) summing micro-batch losses before ``backward()``. A
  frozen backbone in eval mode under a head in training mode is not reported either.

A write through an index into a preallocated buffer (``values[t] = value``, ``history[i] =
loss``: a rollout's storage, per-step losses kept for a plot) is seen as an add: the buffer's
node (``CopySlices``) has its previous node and the value's as inputs, the value is the term.
Its fix is a detached value; a buffer a backward() goes through (REINFORCE's log-probabilities,
a decoder's ``outputs[t] = output``) is what the program wants.

The adds of one call on the user's line (``sum(p.pow(2).sum() for p in params)``,
``functools.reduce``) are one statement's, not one per iteration: not a chain.

Gradient accumulation (micro-batch losses summed, then ``backward()`` through the sum every
few steps) sends a backward through the chain: never reported (nor the window an epoch's end
cuts short, dropped without backward: that line's totals went through backward before).
Totals of floats, detached totals and totals under ``no_grad`` have no ``grad_fn``: the add is
left after one attribute read. Nothing is kept alive: a chain is named by its node's id and
sequence number, its graph watched by a token its nodes hold.

``losses.append(loss)`` is no torch op; see :mod:`tensor_dap.agent.kept_roots`, which this
rule runs at each ``backward()`` and on a sample of ops (``observe``).
"""

from __future__ import annotations

import ast
import collections
import functools
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Optional

import torch

from tensor_dap import catalog
from tensor_dap.agent import (
    carried_graph,
    eval_switch,
    frames,
    kept_roots,
    kept_updates,
    naming,
    optimizers,
)
from tensor_dap.agent.eval_modules import in_eval_mode
from tensor_dap.agent.graph_life import GraphLife
from tensor_dap.agent.graph_nodes import freed_by_backward, graph_node
from tensor_dap.agent.graph_walk import NodeKey, footprint, node_key
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.rules import Report, _penalty_as_number
from tensor_dap.agent.rules.hooks import Args, Kwargs
from tensor_dap.tensor_text import size_text

RULE = catalog.rule("graph-kept")

#: iterations a chain holds before it is reported
MIN_ITERATIONS = 3
_ADDS = frozenset(("add", "add_", "__add__", "__radd__", "__iadd__"))
_UPDATES = kept_updates.UPDATES
_REBINDS = kept_updates.REBINDS
_Tensor = torch.Tensor
_CHAINS = "graph-kept.chains"
_BACKWARDS = kept_roots.BACKWARDS
#: the node keys of the last backward() roots (a term backpropagated before it is added)
_ROOTS = "graph-kept.backward-roots"
_RECENT_ROOTS = 4
#: root node key of each of the last ``torch.autograd.grad`` calls that freed their graph (no
#: ``create_graph``, no ``retain_graph``) -> its user line (see carried_graph.freed_by_grad)
_FREEING_GRADS = "graph-kept.freeing-grads"
#: (code, instruction offset) -> whether an add there runs inside a call (:func:`_inside_call`)
_CALL_SITES = "graph-kept.call-sites"
#: nodes walked to size one iteration's graph and check it does not use the total
_TERM_LIMIT = 5000


@dataclass(eq=False)
class _Chain:
    """One call site's current chain (no tensor, no node: keys only)."""

    path: str
    line: int
    node: NodeKey
    #: backward() calls started before the chain started / last grew
    started: int
    grown: int
    iterations: int = 1
    consumed: bool = False
    reported: bool = False
    #: a term's graph used the total (a recurrence, not an accumulation): never reported
    dependent: bool = False
    #: saved bytes and nodes of the second iteration's graph when it was added
    term_bytes: int = 0
    term_nodes: int = 0
    #: that graph runs only modules in eval mode: an evaluation loop, reported before any
    #: backward() (see the module's docstring)
    evaluating: bool = False
    #: the chain's graph: whether a backward() went through it, and when it is freed (the
    #: token hooked on each node the chain grew by; :mod:`tensor_dap.agent.graph_life`)
    life: Optional[GraphLife] = None
    #: a backward() went through a chain of this site once: gradient accumulation, whose
    #: windows may end without one (the last of an epoch): a dropped total is not reported
    ever_consumed: bool = False
    #: a backward() went through a term on its own (``loss.backward(); total += loss``): the
    #: training-loop form; backward()s of other graphs only (an actor-critic's critic stepping
    #: while the actor's loss sums over the episode) leave the chain to be judged when it goes
    term_backward: bool = False
    #: the token hooked on each term's node (says when a backward goes through one)
    terms: Optional[GraphLife] = None
    #: the most backward()s that ran between two of its growths (a critic's between the
    #: steps of an episode's sum): it has stopped growing once more than that ran since
    gap: int = 0
    #: a buffer written through an index (``buf[t] = value``), and that target as written
    write: bool = False
    target: str = ""
    #: the write is a copy into a view (``buf[i:j].copy_(value)``), ``target`` the view
    copy: bool = False
    #: the total is scaled as it grows: a smoothed loss, ``running = 0.9 * running + 0.1 *
    #: loss``
    smoothed: bool = False
    #: the fix may make the term a number (``.item()``): not a statistic of several elements
    #: smoothed across batches, nor the end of a ``lerp``, which must be a tensor
    number_fix: bool = True
    #: an earlier chain of this site was reported (a total made anew each epoch)
    ever_reported: bool = False

    def restart(self, node: NodeKey, backwards: int) -> None:
        """The site starts a new chain (kept as one record: most adds start one)."""
        self.ever_reported = self.ever_reported or self.reported
        self.node, self.started, self.grown, self.iterations = node, backwards, backwards, 1
        self.consumed = self.reported = self.dependent = self.evaluating = False
        self.term_backward = self.smoothed = False
        self.gap = 0
        for life in (self.life, self.terms):
            if life is not None:
                life.forget()
        self.life = self.terms = None

    def on_backward(self) -> None:
        """A backward went through the chain (gradient accumulation)."""
        self.consumed = self.ever_consumed = True

    def on_term_backward(self) -> None:
        """A backward went through one of the chain's terms."""
        self.term_backward = True

    def waiting(self) -> bool:
        """Whether the chain is to be reported if its graph goes without a backward()."""
        if self.iterations < MIN_ITERATIONS:
            return False
        return not (self.reported or self.consumed or self.dependent or self.ever_consumed)


#: rule_state key: the ids of the optimizers whose ``zero_grad()`` ran and whose ``step()``
#: has not yet: a training step is under way, whose micro-batch losses may be summed in eval
#: mode
_IN_STEP = "graph-kept.in-step"


#: rule_state key: backward() calls when the call sites were last sampled afresh
_RESAMPLED = "graph-kept.resampled-at"
#: backward() calls between two fresh samplings at ``model.eval()`` (a reinforcement-learning
#: loop switching modes at every step pays for one in so many)
_RESAMPLE_EVERY = 8


def install(state: Any) -> list[Any]:
    """Follow the optimizers' ``zero_grad()`` and ``step()`` (see :data:`_IN_STEP`), and
    ``model.eval()``: an evaluation after training steps has its ops sampled afresh, so that
    the outputs it keeps (:func:`kept_roots.observe`) are looked at
    (:mod:`tensor_dap.agent.eval_switch`)."""

    # (the tables are the watch's for good: looked up once here, not at each step)
    rule_state = state.rule_state
    in_step: set[int] = rule_state.setdefault(_IN_STEP, set())
    by_optimizer: dict[int, int] = rule_state.setdefault(kept_updates.STEPS_BY_OPTIMIZER, {})

    def zeroed(optimizer: Any) -> None:
        in_step.add(id(optimizer))

    def stepped(optimizer: Any) -> None:
        key = id(optimizer)
        in_step.discard(key)
        rule_state[kept_updates.STEPS_TAKEN] = rule_state.get(kept_updates.STEPS_TAKEN, 0) + 1
        by_optimizer[key] = by_optimizer.get(key, 0) + 1

    def evaluating() -> None:
        if RULE.id not in state.enabled or state._mode is None:
            return
        backwards = state.rule_state.get(_BACKWARDS, 0)
        if backwards - state.rule_state.get(_RESAMPLED, -_RESAMPLE_EVERY) >= _RESAMPLE_EVERY:
            state.rule_state[_RESAMPLED] = backwards
            state.resample()

    return [
        optimizers.subscribe(optimizers.Subscriber(after_step=stepped, zeroed=zeroed)),
        eval_switch.subscribe(evaluating),
    ]


def applies(op: OpInfo) -> bool:
    """``after`` runs on adds and on writes through an index (``buf[t] = value``)."""
    return op.name in _ADDS or op.name == _WRITE or op.name in _UPDATES or op.name in _REBINDS


def applies_before(op: OpInfo) -> bool:
    """``before`` runs on ``backward()`` / ``autograd.grad`` only."""
    return op.backward


def after(op: OpInfo, args: Args, kwargs: Kwargs, out: Any, caller: Any, state: Any) -> Any:
    if op.name == _WRITE:
        return _written(args, caller, state)
    # (one element first: a residual ``x + f(x)`` leaves here without a grad_fn object made)
    one_element = isinstance(out, _Tensor) and out.numel() == 1
    if not one_element or op.name not in _ADDS:
        if op.name in _REBINDS and not op.inplace and isinstance(out, _Tensor):
            # an EMA remade out of place: `shadow[n] = d * shadow[n] + (1 - d) * p`
            found = kept_updates.check_rebound(args, out, caller, state)
            lerp = op.name == "lerp"
            operands = _operands(args, kwargs, ("input", "end") if lerp else ("input", "other"))
            if found is None and len(operands) == 2 and (lerp or _scaled_operand(operands)):
                # a statistic smoothed across batches, `rm = 0.9 * rm + 0.1 * x.mean(0)`,
                # `rm = torch.lerp(rm, x.mean(0), 0.1)` (a loss's too)
                node = graph_node(out)
                if node is None:
                    return None
                return _grow(node, out, operands, caller, state, smoothing=lerp)
            return found
        # an in-place update of a tensor (or, _foreach, of several): `p_ema.add_(p, ...)`
        if op.name in _UPDATES and op.inplace:
            if op.name == "copy_" and _into_view(args):
                return _copied_into_view(args, caller, state)
            return kept_updates.check(args, caller, state)
        return None
    if op.inplace and kept_updates.from_parameter(args):  # a one-element EMA weight
        return kept_updates.check(args, caller, state)
    node = graph_node(out)
    if node is None:
        return None
    return _grow(node, out, args, caller, state)


def _operands(args: Args, kwargs: Kwargs, names: tuple[str, str]) -> tuple[Any, ...]:
    """The op's two operands, positional or named (``torch.lerp(input=a, end=b, weight=w)``,
    ``rm.lerp(end=x, weight=w)``); fewer when it was not given two."""
    named = kwargs or {}
    found = list(args[:2])
    for name in names[len(found) :]:
        if name in named:
            found.append(named[name])
    return tuple(found)


def _scaled_operand(args: Args) -> bool:
    """Whether an add of several elements may smooth a total across iterations: one operand a
    scaling by a number (``0.9 * running``), the other made so too or without history (the
    first update, from a tensor of zeros); not a layer norm's ``gamma * x_hat + beta``."""
    made = [graph_node(a) if isinstance(a, _Tensor) else None for a in args[:2] if a is not None]
    scalings = [n for n in made if kept_updates.scaled_input(n) is not None]
    return bool(scalings) and all(n is None or n in scalings for n in made)


#: a write through an index: ``buf[t] = value`` (the buffer's node is a ``CopySlices`` whose
#: inputs are the buffer's previous node and the value's)
_WRITE = "__setitem__"


def _written(args: Args, caller: Any, state: Any) -> Any:
    """``buf[t] = value``: a preallocated buffer (a rollout's values, a tensor of per-step
    losses) filled with tensors carrying autograd history is a total as ``+=`` makes one: it
    keeps the graph of every value written, one chain per call site."""
    if len(args) < 3 or not isinstance(args[0], _Tensor) or not isinstance(args[2], _Tensor):
        return None
    node = graph_node(args[0])
    if node is None or _parameter_copy(args[2]):
        return None
    return _grow(node, args[0], (args[0], args[2]), caller, state, write=True)


def _into_view(args: Args) -> bool:
    """``buf[i:j].copy_(value)``: a copy into a view of a buffer (not a tensor of its own, as
    an EMA's weight is)."""
    return len(args) > 1 and isinstance(args[0], _Tensor) and args[0]._base is not None


def _copied_into_view(args: Args, caller: Any, state: Any) -> Any:
    """``preds[i:j].copy_(model(x))``, ``buf.narrow(0, i, n).copy_(value)``: a write into the
    buffer the view is of, as ``preds[i:j] = model(x)`` writes it."""
    base, value = args[0]._base, args[1]
    if not isinstance(value, _Tensor) or _parameter_copy(value):
        return None
    node = graph_node(base)
    if node is None:
        return None
    found = _grow(node, base, (base, value), caller, state, write=True)
    chain = state.rule_state.get(_CHAINS, {}).get(id(caller.f_code) + caller.f_lasti)
    if chain is not None:
        chain.copy = True
    return found


def _parameter_copy(value: Any) -> bool:
    """Whether a value written carries no history, or only a parameter's (``p.view(-1)``,
    ``p.float()``): the parameters flattened into a new buffer (``flat[o:o + n].copy_(p.view(-1))``
    for their norm), not an iteration's graph kept."""
    node = graph_node(value)
    return node is None or kept_updates.from_parameter_node(node)


def _written_target(caller: Any) -> str:
    """The subscript a write stores to, as the statement writes it: the instruction's own
    text (Python 3.11+), else the statement's first subscript target."""
    text = naming.expression_text(caller).strip()
    statement = naming.parsed_statement(text)
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Subscript):
        return text
    copied = _copy_call(statement)
    if copied is not None:  # the view copied into: ``preds[i:j]`` of ``preds[i:j].copy_(v)``
        view = copied.func.value if isinstance(copied.func, ast.Attribute) else copied.func
        return ast.get_source_segment(text, view) or ast.unparse(view)
    if isinstance(statement, ast.Assign):
        for target in statement.targets:
            for one in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(one, ast.Subscript):
                    return ast.get_source_segment(text, one) or ast.unparse(one)
    return text


def _grow(
    node: Any,
    out: Any,
    args: Args,
    caller: Any,
    state: Any,
    write: bool = False,
    smoothing: bool = False,
) -> Any:
    """The add or write at ``caller`` made ``out`` (its node ``node``) of ``args[:2]``: start,
    continue or restart its site's chain; report the chain when it is judged kept
    (``smoothing``: a ``lerp``, whose total is smoothed by its own form)."""
    code = caller.f_code
    if not frames.is_user_code(code):
        return None
    site = id(code) + caller.f_lasti
    chains: dict[int, _Chain] = state.rule_state.setdefault(_CHAINS, {})
    backwards: int = state.rule_state.get(_BACKWARDS, 0)
    chain = chains.get(site)
    term = _term(chain, node, out, args) if chain is not None else None
    if chain is None:
        chains[site] = _Chain(
            code.co_filename, caller.f_lineno, node_key(node), backwards, backwards, write=write
        )
        if write:  # (the instruction's own text: ``val_buf[t]`` of ``a[t], val_buf[t] = ...``)
            chains[site].target = _written_target(caller)
        return None
    if term is None:
        chain.restart(node_key(node), backwards)
        return None
    if chain.iterations == 1 and _inside_call(caller, state):
        chain.restart(node_key(node), backwards)  # the adds of one sum(...) or reduce(...)
        return None
    fresh = _corrected(term, chain.node)  # ``avg += (loss - avg) / (i + 1)``: the loss
    if fresh is not None or smoothing:
        chain.smoothed = True
    chain.number_fix = not smoothing and out.numel() == 1
    chain.node = node_key(node)
    chain.gap = max(chain.gap, backwards - chain.grown)
    chain.grown = backwards
    chain.iterations += 1
    _hook(node, chain, state)
    _watch_term(term, chain, state, fresh)
    if chain.iterations == 2:
        leaves = _size_term(chain, term, node, fresh)
        in_step = bool(state.rule_state.get(_IN_STEP))
        # (a buffer written in eval mode may be one forward's time steps, backpropagated
        # next: a decoder's `outputs[t] = head(h)` under frozen BatchNorm, a policy's
        # log-probabilities; it is judged when its graph goes or training resumes instead)
        chain.evaluating = not (chain.dependent or in_step or write) and in_eval_mode(
            leaves, caller
        )
    if chain.reported or chain.dependent or chain.consumed or chain.iterations < MIN_ITERATIONS:
        return None
    if not (chain.term_backward or chain.evaluating):  # maybe gradient accumulation, or a
        return None  # backward of another graph: judged when its graph goes (_graph_gone)
    chain.reported = True
    acc = args[0] if isinstance(args[0], _Tensor) and args[0] is not term else out
    # (a write's operands are the buffer, the index and the value: named from the statement)
    message = _live_message(chain, out)
    return Report(tensors=[acc, term], message=message, operands=not write)


def before(op: OpInfo, args: Args, kwargs: Kwargs, caller: Any, state: Any) -> Any:
    """At each backward(): count it; report a chain a whole backward left behind, then a
    backward root a list keeps (:mod:`kept_roots`)."""
    backwards = state.rule_state.get(_BACKWARDS, 0)
    state.rule_state[_BACKWARDS] = backwards + 1
    roots = state.rule_state.get(_ROOTS)
    if roots is None:
        roots = state.rule_state[_ROOTS] = collections.deque(maxlen=_RECENT_ROOTS)
    first = _first_target(args, kwargs)
    node = graph_node(first) if isinstance(first, _Tensor) else None
    if node is not None:
        roots.append(node_key(node))
        if op.name == "grad" and not carried_graph.keeps_graph(args, kwargs):
            _note_freeing_grad(node_key(node), caller, state)
    waiting: list[Report] = state.rule_state.get(_WAITING) or []
    if waiting:  # found while another finding was being reported: here, paused here
        report = waiting.pop(0)
        report.frame = frames.user_frame(caller)
        return report
    chains: dict[int, _Chain] = state.rule_state.get(_CHAINS) or {}
    for chain in chains.values():
        if (
            chain.iterations >= MIN_ITERATIONS
            and backwards - chain.grown > chain.gap
            and not (chain.reported or chain.consumed or chain.dependent)
        ):
            chain.reported = True
            user = frames.user_frame(caller)
            if user is not None:
                return _left_report(chain, user, "training resumed, and still holds it")
    return kept_roots.check(args, caller, state, backwards + 1)


def reported_totals(state: Any, path: str) -> list[tuple[str, int]]:
    """``(name, line)`` of each total in the file ``path`` reported for accumulating tensors
    with history (``total += loss``): a list elsewhere keeping values made of it (``history.
    append(total / n)``) keeps them for that line's reason (:func:`kept_roots.observe` says so)."""
    found = []
    for chain in (state.rule_state.get(_CHAINS) or {}).values():
        if chain.path != path or chain.write or not (chain.reported or chain.ever_reported):
            continue
        total, _ = _names(naming.source_line(chain.path, chain.line), chain)
        if _TARGET.fullmatch(total) and (total, chain.line) not in found:
            found.append((total, chain.line))
    return found


def _note_freeing_grad(root: NodeKey, caller: Any, state: Any) -> None:
    """A ``torch.autograd.grad`` that frees its graph ran from ``caller``: its line, by root."""
    user = frames.user_frame(caller)
    if user is None:
        return
    freeing: dict[NodeKey, tuple[str, int]] = state.rule_state.setdefault(_FREEING_GRADS, {})
    freeing[root] = (user.f_code.co_filename, user.f_lineno)
    if len(freeing) > _RECENT_ROOTS:  # (the oldest goes: only the previous root is asked for)
        del freeing[next(iter(freeing))]


def _first_target(args: Args, kwargs: Kwargs) -> Any:
    """The (first) tensor a ``backward()`` starts from: ``loss`` of ``loss.backward()``,
    ``torch.autograd.backward([loss])``, ``torch.autograd.grad(outputs=loss, ...)``."""
    named = kwargs or {}
    first = args[0] if args else named.get("tensors", named.get("outputs"))
    if isinstance(first, (list, tuple)):
        return first[0] if first else None
    return first


def _graph_gone(chain: _Chain, state: Any, life: GraphLife) -> None:
    """The chain's graph is freed (the program dropped its total and nothing it became, such
    as ``total / n``, holds it): report it at its line unless a backward() went through it,
    paused in the frame running now. A buffer written step by step is not, once the program
    raised: an exception unwinding the forward that filled it for a loss (a seq2seq decoder's
    ``outputs[t] = output``) frees it, and the loss's backward() never came."""
    if chain.write and state.program_raised:  # (freed as the program's error unwinds)
        return
    if chain.life is life and chain.waiting():
        chain.reported = True
        # (freed where a create_graph penalty is made a number: grad-lost's finding, and fix)
        if not _penalty_as_number.handed_here(state):
            _emit_dropped(state, _left_report(chain, None))


def raised(
    op: OpInfo, args: Args, kwargs: Kwargs, error: BaseException, caller: Any, state: Any
) -> Optional[Report]:
    """A ``backward()`` raised (a graph an in-place op broke, a loss without history): the
    totals and lists waiting for one cannot be judged any more; they are let go. When it
    raised for going through a graph a backward freed, the tensor carried into this
    iteration with that graph is reported (:mod:`tensor_dap.agent.carried_graph`)."""
    if not op.backward:
        return None
    for chain in (state.rule_state.get(_CHAINS) or {}).values():
        if chain.life is not None:
            chain.life.forget()
    kept_roots.forget_unused(state)
    if not (isinstance(error, RuntimeError) and carried_graph.SECOND_TIME in str(error)):
        return None
    # (a hidden state carried into the next window with its graph: which, and where)
    roots: collections.deque[NodeKey] = state.rule_state.get(_ROOTS) or collections.deque()
    if len(roots) < 2:  # (the previous backward's root: the earlier iteration's graph)
        return None
    named = kwargs or {}
    given = args[0] if args else named.get("tensors", named.get("outputs"))
    targets = list(given) if isinstance(given, (list, tuple)) else [given]
    found = carried_graph.explain(targets, caller, roots[-2][0])
    if found is None:
        return None
    at, text = found
    # (nothing carried from an earlier iteration, and the graph was freed by a gradient taken
    # without keeping it: a PINN's `u_xx = torch.autograd.grad(u_x, x, ...)`)
    grad_at = (state.rule_state.get(_FREEING_GRADS) or {}).get(roots[-2])
    if at is None and grad_at is not None:
        at, text = grad_at, carried_graph.freed_by_grad(grad_at, caller)
    return Report(tensors=[], message=lambda _d, _e: text, at=at, operands=False)


def observe(op: OpInfo, args: Args, out: Any, caller: Any, state: Any) -> None:
    """A sampled op: losses a list keeps that no backward() goes through
    (:func:`kept_roots.observe`)."""
    backwards = state.rule_state.get(_BACKWARDS, 0)
    emit = functools.partial(_emit_dropped, state)
    kept_roots.observe(op.name, out, caller, state, backwards, emit, reported_totals)
    kept_roots.note_scaling(op.name, args, out, state)


def _emit_dropped(state: Any, report: Report) -> None:
    """Report what a graph freed without a backward() left (run from a weak reference's
    callback, where the program let it go): paused in the user's frame running now, if any;
    never raises into the program."""
    try:
        if not _on(state):
            return
        if state._emitting:  # another finding is being reported (or paused on): later
            state.rule_state.setdefault(_WAITING, []).append(report)
            return
        caller = sys._getframe(1)  # the user's frame is above the callback's
        report.frame = frames.user_frame(caller)
        state._emit(RULE.id, report, _DROPPED, caller)
    except Exception as error:
        state._rule_failed(RULE.id, error)


#: reports of graphs freed while another finding was being reported: made at the next
#: backward() or the program's end
_WAITING = "graph-kept.waiting"


#: the op a report made where a tensor was dropped is worded with (no op runs there)
_DROPPED = OpInfo("dropped")


def finish(state: Any) -> list[Report]:
    """At the end of the program (``tensor-dap check``): the chains whose total is still
    alive, no backward() having gone through it (a module-level evaluation loop's total), and
    the losses a list keeps that no backward() went through. A buffer written through an
    index is left when the program ended by an exception: a seq2seq forward collecting its
    steps (``outputs[t] = output``) for a loss that raised never got to its ``backward()``;
    totals and lists are what a program that failed later still kept for nothing."""
    chains: dict[int, _Chain] = state.rule_state.get(_CHAINS) or {}
    reports = state.rule_state.pop(_WAITING, None) or []
    reports += kept_roots.finish_unused(state)
    for chain in chains.values():
        if chain.write and state.program_raised:  # (its backward() may be what it missed)
            continue
        if chain.life is not None and chain.life.alive and chain.waiting():
            chain.reported = True
            chain.life.forget()
            reports.append(_left_report(chain, None, "the program ended"))
    return reports


def _on(state: Any) -> bool:
    return state._mode is not None and RULE.id in state.enabled and RULE.id not in state.failed


def _left_report(chain: _Chain, frame: Any, until: str = "it was dropped") -> Report:
    """The report of a chain no backward() went through, at its line (``frame``: the live
    frame a debugger pauses in)."""
    return Report(
        tensors=[],
        message=_left_message(chain, until),
        frame=frame,
        at=(chain.path, chain.line),
        operands=False,
    )


def _hook(node: Any, chain: _Chain, state: Any) -> None:
    """Hook the chain's token on ``node``, the node it grew by."""
    if chain.life is None:
        chain.life = GraphLife(
            functools.partial(_graph_gone, chain, state), on_backward=chain.on_backward
        )
    if not chain.life.hold(node):  # a node type that takes no hooks: never reported
        chain.dependent = True


def _watch_term(term: Any, chain: _Chain, state: Any, fresh: Any = None) -> None:
    """Whether a backward() goes, or went, through ``term`` on its own: its node was the root
    of a recent backward(), or it went through a backward started from a tensor made of it
    (its saved tensors are freed: ``(loss * 0.5).backward()``, ``scaler.scale(loss)``), or one
    runs through it later (a token hooked on it). ``fresh``: the node of the loss a running
    mean's term corrects the total toward (:func:`_corrected`), looked at in its place."""
    node = fresh if fresh is not None else graph_node(term)
    if node is None or chain.term_backward:
        return
    roots = state.rule_state.get(_ROOTS, ())
    # (``0.1 * loss`` of a smoothed loss: the loss the backward() started from, scaled)
    scaled = kept_updates.scaled_input(node)
    for looked_at in [node] if scaled is None else [node, scaled]:
        if node_key(looked_at) in roots or freed_by_backward(looked_at):
            chain.term_backward = True
            return
    if chain.terms is None:
        chain.terms = GraphLife(_ignore, on_backward=chain.on_term_backward)
    chain.terms.hold(node)
    if scaled is not None:  # (``0.1 * x.mean(0)``: a backward through the forward reaches
        chain.terms.hold(scaled)  # the statistic, not its scaling)


def _ignore(_life: GraphLife) -> None:
    """A term's graph going says nothing (its chain holds it, or a backward freed it)."""


#: the calls that are the add or write itself (``buf[i:j].copy_(value)``, ``torch.lerp``)
_OWN_CALLS = _ADDS | {"copy_", "lerp"}


def _inside_call(caller: Any, state: Any) -> bool:
    """Whether the add runs inside a call on the user's line rather than at a ``+`` / ``+=``
    or an ``add`` call of it: ``sum(p.pow(2).sum() for p in params)``, ``reduce(...)`` make a
    chain of adds within one statement, not one add per iteration (one answer per site)."""
    sites: dict[Any, bool] = state.rule_state.setdefault(_CALL_SITES, {})
    key = (caller.f_code, caller.f_lasti)
    inside = sites.get(key)
    if inside is None:
        called = naming.running_calls(caller)
        inside = sites[key] = called is not None and not _OWN_CALLS.intersection(called)
    return inside


def _term(chain: _Chain, node: Any, out: Any, args: Args) -> Optional[Any]:
    """The operand this add accumulates into the chain, or None when it does not continue
    the chain with a fresh graph."""
    previous = None
    if out is args[0]:  # in place: the total's previous node is an input of its new one
        inputs = [input_node for input_node, _ in node.next_functions]
    else:  # the total is an operand (cheaper: no node tuples made)
        inputs = [graph_node(a) for a in args[:2] if isinstance(a, _Tensor)]
    scaled = None  # ``0.9 * running`` of ``running = 0.9 * running + 0.1 * loss``
    for input_node in inputs:
        if input_node is not None and node_key(input_node) == chain.node:
            previous = input_node
        elif previous is None and _scales(input_node, chain.node):
            previous = scaled = input_node
    if previous is None:
        return None
    for operand in args[:2]:
        if isinstance(operand, _Tensor) and operand is not out:
            grad_fn = graph_node(operand)
            if grad_fn is previous:
                continue
            if grad_fn is None or grad_fn._sequence_nr() <= chain.node[0]:
                return None
            if scaled is not None:
                # (a one-element weight's EMA, `d * e + (1 - d) * p`, is no smoothed loss)
                if kept_updates.from_parameter_node(grad_fn):
                    return None
                chain.smoothed = True
            return operand
    return None


def _scales(node: Any, wanted: NodeKey) -> bool:
    """Whether ``node`` scales the node named ``wanted`` by a number: its only input."""
    scaled = kept_updates.scaled_input(node)
    return scaled is not None and node_key(scaled) == wanted


def _corrected(term: Any, previous: NodeKey) -> Any:
    """The node of what a running mean's term moves the total toward: ``loss`` of ``avg +=
    (loss - avg) / (i + 1)`` or ``running += 0.1 * (loss - running)`` (the term, a scaling by
    a number of a subtraction of the total's previous node, ``previous``, from it); None for
    any other term."""
    difference = kept_updates.scaled_input(graph_node(term))
    if difference is None or type(difference).__name__ != "SubBackward0":
        return None
    inputs = [n for n, _ in difference.next_functions]
    if len(inputs) != 2 or inputs[0] is None or inputs[1] is None:
        return None
    return inputs[0] if node_key(inputs[1]) == previous else None


def _size_term(chain: _Chain, term: Any, node: Any, fresh: Any = None) -> set[int]:
    """Size the second iteration's graph, and check it does not use the total (``x = x +
    f(x)`` is a recurrence, whose graph is wanted); the ids of the parameters it uses (none
    when the walk stopped short). A running mean's term uses the total by its form: what it
    corrects toward, ``fresh``, is the graph walked then."""
    grad_fn = graph_node(term)
    previous = [n for n, _ in node.next_functions if n is not None and n is not grad_fn]
    stop = node_key(previous[0]) if previous else None
    walked = footprint(fresh if fresh is not None else grad_fn, stop=stop, limit=_TERM_LIMIT)
    chain.dependent = walked.reached
    chain.term_bytes, chain.term_nodes = walked.saved_bytes, walked.nodes
    return set() if walked.truncated else walked.leaves


def _fix(acc: str, term: str, chain: _Chain, statement: str = "") -> str:
    """The fix, for an add, a smoothed total (``statement`` with its term a number) or
    (``buf[t] = value``: :func:`_written`) a write."""
    if chain.smoothed and not chain.number_fix:
        fixed = _smoothed_fixes(statement, acc)
        made = f": `{fixed[1]}`" if fixed is not None else " (the `.detach()` of what it adds)"
        return f"Smooth a detached tensor{made}, or update it under `torch.no_grad()`."
    if chain.smoothed:
        fixed = _smoothed_fixes(statement, acc)
        made = (
            f": `{fixed[0]}` (or `{fixed[1]}`)"
            if fixed is not None
            else (" (the `.item()` or `.detach()` of what it adds)")
        )
        return (
            f"Smooth a number or a detached tensor{made}, or run the loop under "
            "`torch.no_grad()` when it needs no gradient."
        )
    if chain.write:
        written = (
            f"{chain.target}.copy_({kept_updates.detached_text(term)})"
            if chain.copy
            else f"{chain.target} = {kept_updates.detached_text(term)}"
        )
        return (
            f"Write a detached tensor: `{written}`, "
            "or run the loop under `torch.no_grad()` when it needs no gradient."
        )
    used = naming.later_methods(chain.path, chain.line, acc) & _TENSOR_METHODS
    if used:  # (``total_loss.item()`` later: a number would break it)
        later = f"`{acc}.{sorted(used)[0]}()`"
        return (
            f"Accumulate a detached tensor: `{acc} += {kept_updates.detached_text(term)}` (the "
            f"later {later} needs a tensor), or run the loop under `torch.no_grad()` when it "
            "needs no gradient."
        )
    detached = kept_updates.detached_text(term)  # (`(loss * len(x)).detach()`)
    number = detached[: -len(".detach()")] + ".item()"
    return (
        f"Accumulate a number or a detached tensor: `{acc} += {number}` (or `{detached}`), or "
        "run the loop under `torch.no_grad()` when it needs no gradient."
    )


#: methods a total is called with that a Python number does not have
_TENSOR_METHODS = frozenset(
    ("item", "cpu", "numpy", "tolist", "detach", "to", "cuda", "float", "mean", "sum", "div")
    + ("div_", "backward", "clone", "sqrt", "exp", "log", "numel", "size", "view")
)


def _verb(chain: _Chain, past: bool = False) -> str:
    """What the total does with each term: accumulates it; a buffer written collects it."""
    if not chain.write:
        return "accumulated" if past else "accumulates"
    return "collected" if past else "collects"


def _live_message(chain: _Chain, out: Any) -> Any:
    def build(described: list[Any], expression: str) -> str:
        acc, term = described[0].name, described[1].name
        if chain.write:  # (the op's own text is the target, ``buf[t]``: the whole statement)
            expression = naming.source_line(chain.path, chain.line) or f"{acc}[...] = {term}"
            acc, term = _names(expression, chain)
        elif chain.smoothed:  # (the op's own text is the sum: the whole statement)
            line = naming.statement_text(chain.path, chain.line)
            expression = line if naming.parsed_statement(line) else expression
            parts = _smoothed_parts(expression)
            if parts is not None:
                acc, term = parts[0], parts[1]
            elif _UNNAMED.match(acc) or _UNNAMED.match(term):
                acc, term = "the total", "the loss"
        elif _UNNAMED.match(acc) or _UNNAMED.match(term):  # named from the line's text instead
            read_acc, read_term = _names(expression, chain)
            acc = read_acc if _UNNAMED.match(acc) else acc
            term = read_term if _UNNAMED.match(term) else term
        walked = footprint(graph_node(out))
        kept = f"{walked.nodes}{'+' if walked.truncated else ''} autograd nodes"
        if walked.saved_bytes:
            kept += f" and {size_text(walked.saved_bytes)} of saved tensors"
        if chain.evaluating:
            why = (
                "the model it runs is in eval mode and no backward() has gone through it: "
                "an evaluation loop without `torch.no_grad()` keeps every batch's activations"
            )
        else:
            why = "backward() never goes through it"
        return (
            f"`{expression}`: {acc} {_verb(chain)} {term}, which carries autograd history, "
            f"across iterations: after {chain.iterations} iterations {acc} holds the graphs of "
            f"all {chain.iterations} ({kept}), and grows every iteration; {why}. "
            f"{_fix(acc, term, chain, expression)}"
        )

    return build


def _left_message(chain: _Chain, until: str = "it was dropped") -> Any:
    def build(described: list[Any], expression: str) -> str:
        acc, term = _names(expression, chain)
        kept = f"about {size_text(chain.term_bytes * chain.iterations)} of saved activations"
        kept += f" and {chain.term_nodes * chain.iterations} autograd nodes"
        where = f"{os.path.basename(chain.path)}:{chain.line}"
        return (
            f"`{expression}` ({where}): {acc} {_verb(chain, past=True)} {term}, which "
            f"carries autograd history, over {chain.iterations} iterations, and no backward() "
            "went through it: "
            f"{acc} kept the graph of every iteration ({kept}) alive until {until}. "
            f"{_fix(acc, term, chain, expression)}"
        )

    return build


#: the name naming.describe gives a tensor it cannot name
_UNNAMED = re.compile(r"operand \d+$")


def _names(expression: str, chain: _Chain) -> tuple[str, str]:
    """``("val_loss", "criterion(out, y)")`` from ``val_loss += criterion(out, y)``;
    ``("val_buf", "v")`` from ``val_buf[t] = v`` (a write: the pair of ``obs_buf[t], val_buf[t] =
    obs, v`` whose target the chain's write is)."""
    text = naming.without_comments(expression).strip()
    if chain.write:
        return _written_names(text, chain)
    smoothed = _smoothed_parts(text) if chain.smoothed else None
    if smoothed is not None:
        return smoothed[0], smoothed[1]
    if chain.smoothed:  # (`running.mul(0.9).add(loss, alpha=0.1)`: no term to quote)
        target = text.partition("=")[0].strip()
        return (target if _TARGET.fullmatch(target) else "the total"), "the loss"
    for sign in ("+=", "="):
        left, found, right = text.partition(sign)
        acc = left.strip()
        if found and _TARGET.fullmatch(acc):
            right = right.strip()
            if sign == "=" and right.startswith(acc):
                right = right[len(acc) :].lstrip(" +")
            return acc, right or "the loss"
    return "the total", "the loss"


def _smoothed_parts(text: str) -> Optional[tuple[str, str, list[ast.expr]]]:
    """``("running", "0.1 * loss", [<the term's node>])`` of ``running = 0.9 * running + 0.1 *
    loss`` (either order), and the other branch of ``... if i else loss`` after the term
    (what the statement must make a number of); None when it is not of that form."""
    statement = naming.parsed_statement(text)
    if isinstance(statement, ast.AugAssign):  # `avg += (loss - avg) / (i + 1)`
        target = ast.unparse(statement.target)
        toward = _corrected_toward(statement.value, target)
        if toward is None:
            return None
        return target, ast.get_source_segment(text, toward) or ast.unparse(toward), [toward]
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
        return None
    target = ast.unparse(statement.targets[0])
    value, others = statement.value, []
    if isinstance(value, ast.IfExp):  # `loss if running is None else 0.98 * running + ...`
        branches = [v for v in (value.body, value.orelse) if isinstance(v, ast.BinOp)]
        if len(branches) != 1:
            return None
        others = [v for v in (value.body, value.orelse) if v is not branches[0]]
        value = branches[0]
    lerped = _lerp_end(value, target)
    if lerped is not None:  # `rm = torch.lerp(rm, x.mean(0), 0.1)`, `rm = rm.lerp(x, 0.1)`
        return target, ast.get_source_segment(text, lerped) or ast.unparse(lerped), [lerped]
    if not isinstance(value, ast.BinOp):
        return None
    sides = (value.left, value.right)
    terms = [s for s in sides if not any(ast.unparse(n) == target for n in ast.walk(s))]
    term = terms[0] if len(terms) == 1 else _corrected_toward(value, target)
    if term is None:
        return None
    return target, ast.get_source_segment(text, term) or ast.unparse(term), [term, *others]


def _lerp_end(value: ast.expr, target: str) -> Optional[ast.expr]:
    """The end ``target`` is moved toward by a ``lerp`` call of it, if ``value`` is one."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
        return None
    if value.func.attr != "lerp":
        return None
    owner = value.func.value
    on_module = isinstance(owner, ast.Name) and owner.id == "torch"
    if on_module:
        start, rest = (value.args[0], value.args[1:]) if value.args else (None, [])
    else:
        start, rest = owner, value.args
    return rest[0] if rest and start is not None and ast.unparse(start) == target else None


def _corrected_toward(value: ast.expr, target: str) -> Optional[ast.expr]:
    """``loss`` of a running mean's ``(loss - avg)``, found in ``value``: the left side of a
    subtraction of ``target`` that does not itself use ``target``."""
    for node in ast.walk(value):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Sub)
            and ast.unparse(node.right) == target
            and not any(ast.unparse(n) == target for n in ast.walk(node.left))
        ):
            return node.left
    return None


def _smoothed_fixes(statement: str, acc: str) -> Optional[tuple[str, str]]:
    """``statement`` with its term made a number, and made detached: ``running = 0.9 *
    running + (0.1 * loss).item()``; None when it is not of that form."""
    text = naming.without_comments(statement).strip()
    parts = _smoothed_parts(text)
    if parts is None or parts[0] != acc:
        return None
    number, detached = text, text
    for node in sorted(parts[2], key=lambda n: -n.col_offset):  # (from the end: offsets hold)
        if node.lineno != 1 or node.end_col_offset is None:
            return None
        start, end = node.col_offset, node.end_col_offset
        made = kept_updates.detached_text(text[start:end])
        item = made[: -len(".detach()")] + ".item()"
        number = number[:start] + item + number[end:]
        detached = detached[:start] + made + detached[end:]
    return number, detached


#: what a total is written to: ``total``, ``self.total``, ``stats["loss"]``
_TARGET = re.compile(r"[A-Za-z_][\w.]*(\[[^\[\]]*\])*")


def _copy_call(statement: Optional[ast.stmt]) -> Optional[ast.Call]:
    """The ``VIEW.copy_(value)`` call the statement is, if it is one."""
    call = statement.value if isinstance(statement, ast.Expr) else None
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "copy_"
        and call.args
    ):
        return call
    return None


def _buffer_of(target: str) -> str:
    """The tensor a write's target is part of: ``preds`` of ``preds[i:j]``,
    ``buf.narrow(0, i, n)`` and ``self.values[t]``."""
    statement = naming.parsed_statement(target)
    node = statement.value if isinstance(statement, ast.Expr) else None
    while node is not None:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value  # (`torch.narrow(preds, 0, i, n)`: its first argument)
            module = isinstance(owner, ast.Name) and owner.id == "torch" and node.args
            node = node.args[0] if module else owner
        else:
            break
    return ast.unparse(node) if node is not None else target.partition("[")[0] or "the buffer"


def _written_names(text: str, chain: _Chain) -> tuple[str, str]:
    """The buffer's name and the value written to it, from the statement's syntax."""
    buffer = _buffer_of(chain.target)
    statement = naming.parsed_statement(text)
    copied = _copy_call(statement)
    if copied is not None:
        return buffer, ast.get_source_segment(text, copied.args[0]) or ast.unparse(copied.args[0])
    if not isinstance(statement, ast.Assign):
        return buffer, "the value"
    value = statement.value

    def source(node: ast.expr) -> str:
        return ast.get_source_segment(text, node) or ast.unparse(node)

    for target in statement.targets:
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            for one, written in zip(target.elts, value.elts):
                if ast.unparse(one) == naming.normalized_expression(chain.target):
                    return buffer, source(written)
        elif isinstance(target, ast.Subscript):
            return source(target.value), source(value)
    return buffer, "the value"
