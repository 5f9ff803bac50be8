"""``inplace-saved``: an in-place op modifies a tensor that autograd saved for backward.

PyTorch notices only later, in ``backward()`` ("one of the variables needed for gradient
computation has been modified by an inplace operation"), far from the line that did it. This
rule looks before each in-place op of user code: it walks the live autograd graphs (from the
tensor itself and the tensors with a ``grad_fn`` held by the variables of the user's frames —
the outputs a later ``backward()`` will start from) and checks the tensors each node saved.
Backward fails when, and only when, the version counter of a saved tensor moves after it was
saved; writing to the target bumps the target's counter, so the question is whether the target
shares its counter with a saved tensor. Autograd's own bookkeeping, which every tensor type has
(plain, other backends, wrapper subclasses whose storage is a placeholder), answers it: the same
tensor; views of one base (``_base``; a view shares its base's counter); the output a node saved
(unpacked, it is a new tensor whose ``grad_fn`` and ``output_nr`` name that output, and it
shares that output's counter). Tensors sharing a counter always show the same ``_version``, so
a saved tensor at another version never matches. Left: ``detach()`` aliases, which share the
counter with no autograd link; they are matched by memory where it is real (the same storage,
or for a wrapper subclass, that of the tensors it wraps: :func:`~tensor_dap.agent.storage.
storage_key`) — so a ``.data`` alias (same memory, own counter) at the same version is reported
too. A node that an in-place op on a view saved
sits inside a ``CopySlices`` node, which does not expose it: not checked.
Nothing is done on other ops: the rule costs nothing until an in-place op runs. Before walking,
the watch's index of the storages the graphs saved (:mod:`tensor_dap.agent.saved_index`, read
once per node as the graphs grow) rules out a write to memory no node saved: a write per step
to a fresh buffer while an episode's graph grows costs the new nodes, not the whole graph.
Saved-tensor hooks are not used: installing them switches off PyTorch's own
version check, which would change the program.

Parameter updates under ``torch.no_grad()`` on leaf tensors are how optimizers work; they are
not reported.

A graph that no ``backward()`` will go through breaks nothing: a VQ-VAE's distances to its
codebook (``x @ codebook.T``, saving the codebook) feed only ``argmin``, and the codebook's EMA
update under ``no_grad`` writes what they saved while the ``distances`` variable is still
alive. So a write is reported at once only when the node that saved the tensor is part of the
written tensor's own graph or of its operands' (the forward goes on from them:
``z /= z.norm(dim=1, keepdim=True)``) or of a one-element tensor's held by
the user's frames (a loss computed already); else the node gets a pre-hook
(``node.register_prehook``) and the finding waits for a ``backward()`` to reach it: reported
then, at the in-place line, paused at the ``backward()`` (before its error unwinds the stack).
"""

from __future__ import annotations

import collections
import functools
import os
import re
import weakref
from typing import Any, Iterator, Optional

import torch

from tensor_dap import catalog
from tensor_dap.agent import frames, naming, saved_index
from tensor_dap.agent.graph_nodes import graph_node, saved_attribute_names, saved_value
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.provenance import NODE_PROV_KEY, Prov
from tensor_dap.agent.rules import Report
from tensor_dap.agent.rules.hooks import Args, Kwargs
from tensor_dap.agent.saved_index import SavedIndex
from tensor_dap.agent.storage import storage_key
from tensor_dap.tensor_text import shape_text

RULE = catalog.rule("inplace-saved")

_Tensor = torch.Tensor
_MAX_NODES = 5000
#: rule_state key: the watch's :class:`SavedIndex`
_INDEX = "inplace-saved.index"
#: ``t.data = x``: gives ``t`` another storage (what a node saved may now live elsewhere; ``set_``
#: does too, but torch hands no mode that call)
_DATA_SET = "data.__set__"
_FREED = "after they have already been freed"


def applies_passthrough(op: OpInfo) -> bool:
    """``t.data = x`` gives ``t`` another storage: the index of saved storages starts over."""
    return op.name == _DATA_SET


def _is_leaf(tensor: Any) -> bool:
    try:
        return bool(tensor.is_leaf)
    except RuntimeError:  # a view made under no_grad and written since: see graph_node
        return False


def before(op: OpInfo, args: Args, kwargs: Kwargs, caller: Any, state: Any) -> Any:
    if op.name == _DATA_SET:
        saved_index.storages_moved()
        return None
    if not args or not isinstance(args[0], _Tensor) or not _writes_in_place(op, args, kwargs):
        return None
    if not frames.is_user_code(caller.f_code) and not _flag_set_on_a_module(op, caller):
        return None
    if not op.inplace and not _first_flagged_calls(caller, state):
        return None
    target = args[0]
    if not torch.is_grad_enabled() and _is_leaf(target) and target.requires_grad:
        return None
    if target.is_inference():  # no version counter: autograd never saved it
        return None
    own = [graph_node(t) for t in (target, target._base) if t is not None]
    # (and the graphs of its other operands, which the written tensor's graph goes on from:
    # ``z /= z.norm(dim=1, keepdim=True)``, whose norm saved z)
    own += [graph_node(a) for a in args[1:] if isinstance(a, _Tensor)]
    losses, others = _roots_in_frames(caller)
    # (the written tensor's own graph, then the losses', then the other tensors')
    phases = [[node for node in own if node is not None], losses, others]
    if not any(phases):
        return None
    index = state.rule_state.get(_INDEX)
    if index is None:
        index = state.rule_state[_INDEX] = SavedIndex()
    if torch.is_inference_mode_enabled():
        # a wrapper subclass's saved output cannot be unpacked in inference mode (the unpacked
        # tensor would be an inference tensor, which has no version counter)
        with torch.inference_mode(False):
            found = _saver(index, phases, target)
    else:
        found = _saver(index, phases, target)
    if found is None:
        return None
    node, phase = found
    unseen = _unseen_by_autograd(node, target, state)
    nodes = _savers(phases[2], target) if phase == 2 else []
    if phase < 2 or not _wait_for_backward(state, nodes, op, target, caller, unseen):
        module = _writing_module(op, caller)
        return Report(tensors=[target], message=_message(op.name, node, target, module, unseen))
    return None


def _unseen_by_autograd(node: Any, target: Any, state: Any) -> bool:
    """Whether the write goes through a ``.data`` alias of what ``node`` saved (the memory is
    the same, the version counter is not): autograd then never sees it, and a ``backward()``
    computes its gradient from the written values without an error. Known where the watch saw
    the alias made (``samples = fake.data``, its provenance), written through itself or a view
    of it (``p.data[..., 4].sigmoid_()``)."""
    provenance = state.provenance
    if not any(
        prov is not None and prov.op == "data"
        for prov in (provenance.lookup(target), provenance.lookup(_root(target)))
    ):
        return False
    return not _saved_by(node, _Target(target, by_memory=False))


#: how a module's input is named (:func:`_writing_module`)
_MODULE_INPUT = "the input of "


def _writing_module(op: OpInfo, caller: Any) -> Optional[str]:
    """The module whose flag made the write, as the user's frame reaches it
    (``self.decoder.2 (Dropout(p=0.2, inplace=True))``); None for a write of the user's own
    code, or a module the frame does not reach."""
    if not _flag_set_on_a_module(op, caller):
        return None
    module = frames.read_locals(caller).get("self")
    user = frames.user_frame(caller)
    if not isinstance(module, torch.nn.Module) or user is None:
        return None
    for name, value in frames.read_locals(user).items():
        if isinstance(value, torch.nn.Module):
            for path, inner in value.named_modules():
                if inner is module:
                    return f"{'.'.join(p for p in (name, path) if p)} ({module!r})"
    return None


def _savers(roots: list[Any], target: Any) -> list[Any]:
    """Every live node reachable from ``roots`` that saved a tensor sharing ``target``'s
    counter: a backward may reach any of them (a prototype saved by the distances feeding
    ``argmin`` and by the logits feeding the loss)."""
    return [node for node, _ in _saving_nodes([roots], _Target(target))]


def _saver(index: SavedIndex, phases: list[list[Any]], target: Any) -> Optional[tuple[Any, int]]:
    """The node that saved a tensor sharing ``target``'s version counter, and the phase of
    roots it was found from: looked for only when the index of saved memory says one may have
    (:mod:`tensor_dap.agent.saved_index`)."""
    if not index.may_have_saved(target, [root for phase in phases for root in phase]):
        return None
    return _find_saver(phases, _Target(target))


#: what a local variable holding a graph's root is: the tensor, or a list or tuple of them
_HOLDERS = (_Tensor, list, tuple)


def _roots_in_frames(frame: Any, depth: int = 6) -> tuple[list[Any], list[Any]]:
    """``grad_fn`` of the tensors held by local variables of ``frame`` and its callers: those
    of one-element tensors (losses), those of the others."""
    losses: list[Any] = []
    others: list[Any] = []
    while frame is not None and depth > 0:
        try:  # (a module's frame holds its globals: most are no tensor, list or tuple)
            values = [v for v in frames.read_locals(frame).values() if isinstance(v, _HOLDERS)]
        except Exception:
            values = []
        for value in values:
            if isinstance(value, _Tensor):
                items: Any = (value,)
            elif isinstance(value, (list, tuple)):
                items = value[:64]
            else:
                continue
            for item in items:
                node = graph_node(item) if isinstance(item, _Tensor) else None
                if node is not None:
                    (losses if item.numel() == 1 else others).append(node)
        frame = frame.f_back
        depth -= 1
    return losses, others


#: rule_state key: the writes waiting for a backward() to reach what they modified
_PENDING = "inplace-saved.pending"
#: writes waiting at most (the oldest are let go)
_MAX_PENDING = 64


class _Pending:
    """A write to what a node saved, reported if a ``backward()`` reaches the node: the node
    holds this as its pre-hook (freed with it, unreported)."""

    __slots__ = ("path", "line", "texts", "reached", "__weakref__")

    def __init__(self, path: str, line: int, texts: list[str]) -> None:
        #: the finding's text naming each node that saved the tensor, in order
        self.path, self.line, self.texts = path, line, texts
        #: the node a backward reached, by its index in ``texts``
        self.reached: Optional[int] = None

    def reach(self, index: int, grad_outputs: Any) -> None:  # (in the autograd engine's thread)
        if self.reached is None:
            self.reached = index


def _wait_for_backward(
    state: Any, nodes: list[Any], op: OpInfo, target: Any, caller: Any, unseen: bool = False
) -> bool:
    """Hook ``nodes`` to report the write when a ``backward()`` reaches one; False when it
    cannot be (no user frame, a node without pre-hooks)."""
    user = frames.user_frame(caller)
    if user is None or not nodes:
        return False

    (name,) = naming.name_tensors([target], op.name, caller, user, True)
    shape = shape_text(target.shape) if target.layout == torch.strided else ""
    path, line = user.f_code.co_filename, user.f_lineno
    at = f" ({os.path.basename(path)}:{line})"
    expression = naming.expression_text(user)
    texts = [_text(op.name, node, name, shape, target, expression, at, unseen) for node in nodes]
    pending = _Pending(path, line, texts)
    try:
        for index, saver in enumerate(nodes):
            saver.register_prehook(functools.partial(pending.reach, index))
    except Exception:
        return False
    waiting = state.rule_state.setdefault(_PENDING, [])
    waiting[:] = [ref for ref in waiting if ref() is not None][-(_MAX_PENDING - 1) :]
    waiting.append(weakref.ref(pending))
    return True


def applies_before(op: OpInfo) -> bool:
    """``before`` runs on in-place ops only (``add_``, ``__setitem__``, ``copy_``...) and on the
    functions that run in place when asked (``F.dropout(x, inplace=True)``, ``nn.ReLU(inplace=
    True)``; the engine's C path calls it only when their flag is set: :func:`screen`)."""
    return (op.inplace and not op.passthrough) or op.name in INPLACE_FLAG_AT


#: functions with an ``inplace`` flag (``torch.nn.functional``'s activations and dropouts,
#: which ``nn.ReLU(inplace=True)`` and ``nn.Dropout(inplace=True)`` call), and its position
INPLACE_FLAG_AT = {
    **dict.fromkeys(("relu", "relu6", "selu", "silu", "mish", "hardsigmoid", "hardswish"), 1),
    **dict.fromkeys(("elu", "celu", "leaky_relu"), 2),
    **dict.fromkeys(("hardtanh", "threshold", "dropout", "alpha_dropout"), 3),
    **dict.fromkeys(("feature_alpha_dropout", "dropout1d", "dropout2d", "dropout3d"), 3),
    "rrelu": 4,
}


def screen(op: OpInfo) -> Optional[int]:
    """A function with an ``inplace`` flag is checked only when the flag is set: the flag's
    position (see :mod:`tensor_dap.agent.rules`)."""
    return None if op.inplace else INPLACE_FLAG_AT.get(op.name)


#: rule_state key: call site (or module) of a function run in place by its flag -> calls
#: checked; and how many are
_FLAGGED = "inplace-saved.flagged-calls"
FLAGGED_CHECKS = 4


def _first_flagged_calls(caller: Any, state: Any) -> bool:
    """Whether this call of a function run in place by its flag is among the first
    :data:`FLAGGED_CHECKS` of its site (of its module, for ``nn.ReLU(inplace=True)``, whose
    calls all come from torch's one line): a CNN's ReLUs run in place at every layer of every
    step, and what they write is the same each time (a Conv's or a BatchNorm's output, which
    nothing saved); a walk of the graphs costs ~100 µs each."""
    module = (
        frames.read_locals(caller).get("self")
        if _MODULES_PACKAGE in (caller.f_code.co_filename)
        else None
    )
    key = (id(caller.f_code), caller.f_lasti, id(module))
    counts: dict[Any, int] = state.rule_state.setdefault(_FLAGGED, {})
    seen = counts.get(key, 0)
    if seen >= FLAGGED_CHECKS:
        return False
    counts[key] = seen + 1
    return True


def _writes_in_place(op: OpInfo, args: Args, kwargs: Kwargs) -> bool:
    """Whether the op writes its first argument: an in-place op, or a function whose
    ``inplace`` flag is set."""
    if op.inplace:
        return True
    position = INPLACE_FLAG_AT.get(op.name)
    if position is None:
        return False
    given = (kwargs or {}).get("inplace", args[position] if len(args) > position else False)
    flag = given is True or (isinstance(given, int) and bool(given))  # (as the C screen reads)
    return flag and (op.name not in _DROPOUTS or _drops(args, kwargs))


#: the dropouts among them: ``(input, p, training, inplace)``
_DROPOUTS = frozenset(
    ("dropout", "alpha_dropout", "feature_alpha_dropout", "dropout1d", "dropout2d", "dropout3d")
)


def _drops(args: Args, kwargs: Kwargs) -> bool:
    """Whether a dropout writes at all: in training and with a probability above 0 (in eval
    mode, or with ``p=0``, it hands its input back untouched: no version moves)."""
    named = kwargs or {}
    p = named.get("p", args[1] if len(args) > 1 else 0.5)
    training = named.get("training", args[2] if len(args) > 2 else True)
    return bool(training) and not (isinstance(p, (int, float)) and p == 0)


#: where ``nn.ReLU(inplace=True)`` and its kind call their function from (library code, yet
#: the write is the flag the user set)
_MODULES_PACKAGE = os.path.join("torch", "nn", "modules", "")


def _flag_set_on_a_module(op: OpInfo, caller: Any) -> bool:
    """Whether a library frame's write is a module's flag (``nn.ReLU(inplace=True)``)."""
    return not op.inplace and _MODULES_PACKAGE in caller.f_code.co_filename


def applies(op: OpInfo) -> bool:
    """``after`` runs on ``backward()`` / ``autograd.grad``: the writes it reached."""
    return op.backward


def after(op: OpInfo, args: Args, kwargs: Kwargs, out: Any, caller: Any, state: Any) -> Any:
    return _reached(state, caller)


def raised(
    op: OpInfo, args: Args, kwargs: Kwargs, error: BaseException, caller: Any, state: Any
) -> Optional[Report]:
    """``backward()`` raised (the version check of what was written): the write it reached."""
    return _reached(state, caller) if op.backward else None


def _said(text: str, _described: list[Any], _expression: str) -> str:
    return text


def _reached(state: Any, caller: Any) -> Optional[Report]:
    """The first write the ``backward()`` called from ``caller`` reached (its finding at the
    in-place line, paused at the backward's); None when none did."""
    waiting = state.rule_state.get(_PENDING)
    if not waiting:
        return None
    for ref in waiting:
        pending = ref()
        if pending is not None and pending.reached is not None:
            waiting.remove(ref)
            text = pending.texts[pending.reached]
            user = frames.user_frame(caller)
            if user is not None:
                call = naming.expression_text(user)
                where = f"{os.path.basename(user.f_code.co_filename)}:{user.f_lineno}"
                text += f" (`{call}` at {where} went through it.)"
            return Report(
                tensors=[],
                message=functools.partial(_said, text),
                at=(pending.path, pending.line),
                operands=False,
            )
    return None


class _Target:
    """What a saved tensor is compared with: the written tensor, its base and its version."""

    __slots__ = ("tensor", "root", "version", "grad_fn", "output_nr", "storage", "by_memory")

    def __init__(self, tensor: Any, by_memory: bool = True) -> None:
        """``by_memory``: a saved tensor sharing only the target's memory counts (an alias
        made without autograd's link)."""
        self.tensor = tensor
        self.by_memory = by_memory
        self.root = _root(tensor)
        self.version = tensor._version
        self.grad_fn = graph_node(self.root)
        self.output_nr = self.root.output_nr if self.grad_fn is not None else -1
        self.storage: Any = _UNSET

    def shares_counter(self, saved: Any) -> bool:
        """Whether writing to the target bumps the version counter of ``saved``."""
        if saved._version != self.version:  # one counter cannot show two versions
            return False
        if saved is self.tensor:
            return True
        root = _root(saved)
        if root is self.root:  # views of one base share the base's counter
            return True
        grad_fn = graph_node(root)
        # a saved output unpacks as a new tensor that is that output of its node
        if grad_fn is not None and grad_fn is self.grad_fn and root.output_nr == self.output_nr:
            return True
        # a detach() alias: no autograd link, only the memory says so (where it is real)
        if not self.by_memory:
            return False
        if self.storage is _UNSET:
            self.storage = storage_key(self.tensor)
        return self.storage is not None and storage_key(saved) == self.storage


_UNSET = object()


def _root(tensor: Any) -> Any:
    base = tensor._base  # a view's _base is the tensor it views (never itself a view)
    return tensor if base is None else base


def _find_saver(phases: list[list[Any]], target: _Target) -> Optional[tuple[Any, int]]:
    """The first live node that saved a tensor sharing ``target``'s version counter, and the
    phase of roots it was found from."""
    return next(_saving_nodes(phases, target), None)


def _saving_nodes(phases: list[list[Any]], target: _Target) -> Iterator[tuple[Any, int]]:
    """``(node, phase)`` of each live node that saved a tensor sharing ``target``'s version
    counter, walking from each phase's roots in turn (nodes seen from an earlier phase are not
    walked again; :data:`_MAX_NODES` at most)."""
    seen: set[Any] = set()  # the nodes themselves (see graph_walk.node_key)
    for phase, roots in enumerate(phases):
        queue = collections.deque(roots)
        while queue and len(seen) < _MAX_NODES:
            node = queue.popleft()
            if node is None or node in seen:
                continue
            seen.add(node)
            if _saved_by(node, target):
                yield node, phase
            queue.extend(next_node for next_node, _ in node.next_functions)


def _saved_by(node: Any, target: _Target) -> bool:
    """Whether ``node`` saved a tensor sharing ``target``'s version counter."""
    for attr in saved_attribute_names(node):
        try:
            value = saved_value(node, attr)  # (a hook's packed tensor: not unpacked, not judged)
        except RuntimeError as error:
            if _FREED in str(error):  # backward already freed this node's saved tensors
                return False
            continue  # already modified by an earlier in-place op
        except Exception:
            continue
        values = value if isinstance(value, (tuple, list)) else (value,)
        for item in values:
            if isinstance(item, _Tensor) and target.shares_counter(item):
                return True
    return False


def _op_of(node: Any) -> tuple[str, Optional[Prov]]:
    prov = node.metadata.get(NODE_PROV_KEY) if hasattr(node, "metadata") else None
    if isinstance(prov, Prov):
        return prov.op, prov
    name = re.sub(r"Backward\d*$", "", type(node).__name__)
    if isinstance(node, torch.autograd.function.BackwardCFunction):  # the user's Function
        return name or type(node).__name__, None
    return name.lower() or type(node).__name__, None


def _message(
    op_name: str, node: Any, target: Any, module: Optional[str] = None, unseen: bool = False
) -> Any:
    """``module``: the module whose ``inplace=True`` wrote (its input has no name of the
    user's: the module's own parameter's is ``input``); ``unseen``: see :func:`_text`."""

    def build(described: list[Any], expression: str) -> str:
        d = described[0]
        name = f"{_MODULE_INPUT}{module}" if module else d.name
        return _text(op_name, node, name, d.shape_text, target, expression, unseen=unseen)

    return build


def _text(
    op_name: str,
    node: Any,
    name: str,
    shape: str,
    target: Any,
    expression: str,
    at: str = "",
    unseen: bool = False,
) -> str:
    """The finding's text; ``at``: where the write is, when the finding comes later;
    ``unseen``: through a ``.data`` alias, which autograd does not see
    (:func:`_unseen_by_autograd`)."""
    saver, prov = _op_of(node)
    where = ""
    fix = _fix(op_name, name, target)
    if prov is not None:
        text = naming.source_line(prov.path, prov.line)
        where = f" at {prov.where()}" + (f" (`{text}`)" if text else "")
        # (the statement writing is the one reading: `h[:, t + 1] = f(h[:, t])` in a loop)
        if op_name == "__setitem__" and text and re.match(rf"{re.escape(expression)}\s*=", text):
            fix = _recurrence_fix(name)
    alias = "a view of a .data alias" if target._base is not None else "a .data alias"
    outcome = (
        f"{name} is {alias}, so autograd does not see the write: a backward() through "
        "it raises no error and computes its gradients from the modified values"
        if unseen
        else "A backward() through it fails with 'modified by an inplace operation'"
    )
    return (
        f"`{expression}`{at}: in-place {op_name} modifies {name} {shape}, which "
        f"{saver} saved for backward{where} ({type(node).__name__}). {outcome}. {fix}"
    )


def _recurrence_fix(name: str) -> str:
    """The statement writing into ``name`` reads it (``h[:, t + 1] = f(h[:, t])``, a recurrence
    in a preallocated tensor): a copy made before the write, which the read then comes from,
    fails the same way."""
    return (
        f"The statement reads {name} and writes into it: read the tensor as it was and write "
        f"into a copy ({name}_new = {name}.clone(), then {name}_new[...] = ...{name}[...]...); "
        f"in a loop whose steps read what the step before wrote (a recurrence), keep the steps "
        f"in a list (`states.append(...)`, reading `states[-1]`) and `torch.stack(states, "
        f"dim=...)` after the loop."
    )


#: in-place op -> the operator its out-of-place form is written with
_OPERATORS = {
    "add_": "+", "__iadd__": "+", "sub_": "-", "__isub__": "-", "mul_": "*", "__imul__": "*",
    "div_": "/", "__itruediv__": "/", "pow_": "**", "__ipow__": "**",
}  # fmt: skip


def _fix(op_name: str, name: str, target: Any) -> str:
    """How to write it without breaking backward: a module's parameter (which cannot be rebound
    to a computed tensor) is updated after backward(); another tensor is made anew (``h = h *
    2`` for ``h.mul_(2)``, ``h = h.relu()`` for ``h.relu_()``) or cloned."""
    if isinstance(target, torch.nn.Parameter):
        return (
            f"Update {name} after backward() (after optimizer.step()), or have the op that "
            f"saved it use a copy ({name}.clone())."
        )
    if op_name in INPLACE_FLAG_AT and name.startswith(_MODULE_INPUT):  # a module's flag
        return f"Drop inplace=True from {name[len(_MODULE_INPUT) :]}."
    if op_name in INPLACE_FLAG_AT:  # `F.dropout(att, p, training, inplace=True)`
        return (
            f"Drop inplace=True from the {op_name} call, or from the module that makes it "
            f"(nn.Dropout, nn.ReLU...), or clone {name} first."
        )
    operator = _OPERATORS.get(op_name)
    method = op_name[:-1] if op_name.endswith("_") and not op_name.endswith("__") else None
    indexed = "[" in name and target._base is not None  # (not `batch["x"]`: no view)
    if indexed and (operator is not None or (method is not None and op_name != "copy_")):
        # (`p[..., 4] = p[..., 4].sigmoid()` writes into p all the same: a new tensor is the fix)
        made = f"{name} {operator} ..." if operator is not None else f"{name}.{method}(...)"
        return (
            f"Compute it out of place into a new tensor (`{made}` leaves {name.split('[')[0]} "
            f"as it was) and use that, or clone {name} first."
        )
    if operator is not None:
        return f"Use an out-of-place op ({name} = {name} {operator} ...) or clone {name} first."
    if method is not None and op_name != "copy_":
        return f"Use the out-of-place op ({name} = {name}.{method}(...)) or clone {name} first."
    return f"Write into a copy ({name} = {name}.clone() before the write)."
