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
"""

from __future__ import annotations

import collections
import re
from typing import Any, Optional

import torch

from tensor_dap import catalog
from tensor_dap.agent import frames, naming, saved_index
from tensor_dap.agent.graph_nodes import graph_node, saved_attribute_names
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.provenance import NODE_PROV_KEY, Prov
from tensor_dap.agent.rules import Report
from tensor_dap.agent.rules.hooks import Args, Kwargs
from tensor_dap.agent.saved_index import SavedIndex
from tensor_dap.agent.storage import storage_key

RULE = catalog.rule("inplace-saved")

_Tensor = torch.Tensor
_MAX_NODES = 5000
#: rule_state key: the watch's :class:`SavedIndex`
_INDEX = "inplace-saved.index"
#: ``t.data = x``: gives ``t`` another storage (what a node saved may now live elsewhere; ``set_``
#: does too, but torch hands no mode that call)
_DATA_SET = "data.__set__"
_FREED = "after they have already been freed"


def applies(op: OpInfo) -> bool:
    """Only in-place ops (``add_``, ``__setitem__``, ``copy_``...) are checked: every other op
    leaves the plan without a call."""
    return op.inplace and not op.passthrough


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
    if not op.inplace or not args or not isinstance(args[0], _Tensor):
        return None
    if not frames.is_user_code(caller.f_code):
        return None
    target = args[0]
    if not torch.is_grad_enabled() and _is_leaf(target) and target.requires_grad:
        return None
    if target.is_inference():  # no version counter: autograd never saved it
        return None
    roots = [graph_node(t) for t in (target, target._base) if t is not None]
    roots = [node for node in roots if node is not None]
    roots.extend(_roots_in_frames(caller))
    if not roots:
        return None
    index = state.rule_state.get(_INDEX)
    if index is None:
        index = state.rule_state[_INDEX] = SavedIndex()
    if torch.is_inference_mode_enabled():
        # a wrapper subclass's saved output cannot be unpacked in inference mode (the unpacked
        # tensor would be an inference tensor, which has no version counter)
        with torch.inference_mode(False):
            found = _saver(index, roots, target)
    else:
        found = _saver(index, roots, target)
    if found is None:
        return None
    return Report(tensors=[target], message=_message(op.name, found))


def _saver(index: SavedIndex, roots: list[Any], target: Any) -> Optional[Any]:
    """The node that saved a tensor sharing ``target``'s version counter: looked for only when
    the index of saved memory says one may have (:mod:`tensor_dap.agent.saved_index`)."""
    if not index.may_have_saved(target, roots):
        return None
    return _find_saver(roots, _Target(target))


def _roots_in_frames(frame: Any, depth: int = 6) -> list[Any]:
    """``grad_fn`` of the tensors held by local variables of ``frame`` and its callers."""
    roots = []
    while frame is not None and depth > 0:
        try:
            values = list(frames.read_locals(frame).values())
        except Exception:
            values = []
        for value in values:
            items = value if isinstance(value, (list, tuple)) else (value,)
            for item in items[:64]:
                node = graph_node(item) if isinstance(item, _Tensor) else None
                if node is not None:
                    roots.append(node)
        frame = frame.f_back
        depth -= 1
    return roots


class _Target:
    """What a saved tensor is compared with: the written tensor, its base and its version."""

    __slots__ = ("tensor", "root", "version", "grad_fn", "output_nr", "storage")

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor
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
        if self.storage is _UNSET:
            self.storage = storage_key(self.tensor)
        return self.storage is not None and storage_key(saved) == self.storage


_UNSET = object()


def _root(tensor: Any) -> Any:
    base = tensor._base  # a view's _base is the tensor it views (never itself a view)
    return tensor if base is None else base


def _find_saver(roots: list[Any], target: _Target) -> Optional[Any]:
    """The first live node that saved a tensor sharing ``target``'s version counter."""
    seen: set[int] = set()
    queue = collections.deque(roots)
    while queue and len(seen) < _MAX_NODES:
        node = queue.popleft()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for attr in saved_attribute_names(node):
            try:
                value = getattr(node, attr)
            except RuntimeError as error:
                if _FREED in str(error):  # backward already freed this node's saved tensors
                    break
                continue  # already modified by an earlier in-place op
            except Exception:
                continue
            values = value if isinstance(value, (tuple, list)) else (value,)
            for item in values:
                if isinstance(item, _Tensor) and target.shares_counter(item):
                    return node
        queue.extend(next_node for next_node, _ in node.next_functions)
    return None


def _op_of(node: Any) -> tuple[str, Optional[Prov]]:
    prov = node.metadata.get(NODE_PROV_KEY) if hasattr(node, "metadata") else None
    if isinstance(prov, Prov):
        return prov.op, prov
    name = re.sub(r"Backward\d*$", "", type(node).__name__)
    return name.lower() or type(node).__name__, None


def _message(op_name: str, node: Any) -> Any:
    saver, prov = _op_of(node)

    def build(described: list[Any], expression: str) -> str:
        d = described[0]
        where = ""
        if prov is not None:
            text = naming.source_line(prov.path, prov.line)
            where = f" at {prov.where()}" + (f" (`{text}`)" if text else "")
        return (
            f"`{expression}`: in-place {op_name} modifies {d.name} {d.shape_text}, which "
            f"{saver} saved for backward{where} ({type(node).__name__}). backward() will fail "
            f"with 'modified by an inplace operation'. Use an out-of-place op "
            f"(e.g. {d.name} = {d.name} + ...) or clone {d.name} before it is used."
        )

    return build
