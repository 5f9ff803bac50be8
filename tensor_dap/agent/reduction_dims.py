"""Which dim a reduction removed from the tensor it made (``cm.sum(1)``: dim 1 of ``cm``).

The ``broadcast`` rule asks it of an operand one rank short of the other: a total over a
non-leading dim, without ``keepdim``, lines up with the wrong dims of the tensor it came from
(``cm / cm.sum(1)`` on a square matrix divides each value by another row's total, and raises
nothing). The answer comes from the reduction's autograd node (``_saved_dim``, for a tensor with
history) or else from the reduction's call on the line the watch's provenance records
(``dim`` as the line writes it: an integer literal), and only of the tensor it is asked
about (``A.T / A.sum(1)`` divides by the sums it means to). A scalar shift or scale after it
(``cm.sum(1) + 1e-8``, ``.clamp(min=1)``, ``.float()``) keeps its dims and is looked through.
Anything else, or a dim the line does not spell as a number, is no answer (None).
"""

from __future__ import annotations

import ast
import functools
from typing import Any, Optional

from tensor_dap.agent import naming
from tensor_dap.agent.lineage import tensor_identity
from tensor_dap.agent.provenance import Prov

#: reductions that remove a dim unless ``keepdim=True`` (their op names)
REDUCTIONS = frozenset(
    ("sum", "mean", "nansum", "nanmean", "norm", "linalg_vector_norm", "prod", "amax", "amin")
    + ("max", "min", "std", "var", "logsumexp", "count_nonzero", "median", "nanmedian")
)

#: ops that keep their one tensor input's shape (with a number as the other operand)
_SHAPE_KEEPING_OPS = frozenset(
    ("float", "double", "half", "bfloat16", "long", "int", "to", "type", "clone", "contiguous")
    + ("detach", "cpu", "cuda", "add", "__add__", "__radd__", "sub", "__sub__", "mul")
    + ("__mul__", "__rmul__", "div", "__truediv__", "clamp", "clamp_min", "clip", "sqrt")
    + ("rsqrt", "pow", "__pow__", "reciprocal", "abs", "exp", "log", "log1p", "neg")
)
#: their autograd nodes (with history)
_SHAPE_KEEPING_NODES = frozenset(
    ("AddBackward0", "AddBackward1", "SubBackward0", "SubBackward1", "MulBackward0")
    + ("MulBackward1", "DivBackward0", "DivBackward1", "ClampMinBackward0", "ClampBackward1")
    + ("PowBackward0", "SqrtBackward0", "RsqrtBackward0", "ToCopyBackward0", "CloneBackward0")
    + ("ReciprocalBackward0", "AbsBackward0", "ExpBackward0", "LogBackward0", "NegBackward0")
)
#: ops and nodes followed back from the operand, at most
_DEPTH = 3
_WORD_BITS = 1 << 64


def removed_dim(tensor: Any, source: Any, provenance: Any) -> Optional[tuple[int, str]]:
    """``(dim, reduction)``: the dim (from 0, of the reduced tensor's rank, ``tensor.ndim +
    1``) a reduction without ``keepdim`` removed from ``source`` to make ``tensor``, and the
    reduction's op name; None when ``tensor`` was not made so, not of ``source`` (itself, or
    the same op of the same inputs: ``out.exp() / out.exp().sum(1)``, as far as the autograd
    graph or the provenance says), or the dim is not known."""
    rank = tensor.ndim + 1
    found = None
    node = reduction_node(tensor.grad_fn)
    if node is not None:
        inputs = [n for n, _ in node.next_functions if n is not None]
        found = _node_dim(node) if inputs and _same_node(inputs[0], _node_of(source)) else None
    elif provenance is not None:
        prov, made = reduction_prov(provenance.lookup(tensor)), provenance.lookup(source)
        if prov is not None and _of_source(prov, source, made):
            dim = _line_dim(prov.path, prov.line, prov.op)
            found = None if dim is None else (dim, prov.op)
    if found is None:
        return None
    dim, reduction = found
    dim = dim + rank if dim < 0 else dim
    return (dim, reduction) if 0 <= dim < rank else None


def reduced_from(tensor: Any, provenance: Any) -> Any:
    """What a reduction (over any dim, ``keepdim`` or not) made ``tensor`` of: the node or the
    provenance record of its input, to compare with another's (:func:`same_source`); None
    when it was not made by a reduction, as far as they say."""
    node = reduction_node(tensor.grad_fn)
    if node is not None:
        inputs = [n for n, _ in node.next_functions if n is not None]
        return inputs[0] if inputs else None
    prov = reduction_prov(provenance.lookup(tensor)) if provenance is not None else None
    return prov.parents[0] if prov is not None and prov.parents else None


def same_source(one: Any, other: Any) -> bool:
    """Whether two :func:`reduced_from` answers are the same value."""
    if one is None or other is None:
        return False
    if isinstance(one, Prov) and isinstance(other, Prov):
        return _same_prov(one, other)
    return _same_node(one, other)


def reduction_node(node: Any) -> Any:
    """The reduction's node a tensor's ``grad_fn`` is, or follows through scalar shifts and
    scales (a node with a ``_saved_keepdim``); None otherwise."""
    for _ in range(_DEPTH + 1):
        if node is None:
            return None
        if type(node).__name__ not in _SHAPE_KEEPING_NODES:
            return node if hasattr(node, "_saved_keepdim") else None
        inputs = [n for n, _ in node.next_functions if n is not None]
        if len(inputs) != 1:  # (two tensors with history: their shapes are not known)
            return None
        node = inputs[0]
    return None


def _of_source(reduction: Prov, source: Any, made: Optional[Prov]) -> bool:
    """Whether the reduction was of ``source`` (whose record is ``made``): the same record, or,
    where the engine recorded none for ``source`` (a site past its sampled first hits:
    ``cm = cm + batch_cm`` in a loop), the very tensor, alive since (its ``id()``)."""
    if reduction.parents:
        return made is not None and _same_prov(reduction.parents[0], made)
    return made is None and reduction.unrecorded[:1] == (tensor_identity(source),)


def reduction_prov(prov: Any) -> Any:
    """The reduction's provenance record a tensor's is, or follows as :func:`reduction_node`
    does (one with the reduced tensor's record as its first parent, or of a tensor with none:
    :func:`_of_source`); None otherwise."""
    for _ in range(_DEPTH + 1):
        if prov is None:
            return None
        if prov.op in REDUCTIONS:
            return prov if prov.parents or prov.unrecorded else None
        if prov.op not in _SHAPE_KEEPING_OPS or len(prov.parents) != 1:
            return None
        prov = prov.parents[0]
    return None


def _node_of(tensor: Any) -> Any:
    """Where ``tensor``'s history starts: its ``grad_fn`` or, for a leaf that requires grad,
    its ``AccumulateGrad`` (the variable, compared by :func:`_same_node`)."""
    return tensor.grad_fn if tensor.grad_fn is not None else tensor


def _same_node(node: Any, other: Any) -> bool:
    """The same node (or ``AccumulateGrad`` of the same leaf), or a node of the same type with
    the same inputs (``out.exp()`` computed twice)."""
    if node is other:
        return True
    if type(node).__name__ == "AccumulateGrad":
        return getattr(node, "variable", None) is other
    if type(node) is not type(other) or not hasattr(other, "next_functions"):
        return False
    mine, theirs = node.next_functions, other.next_functions
    return (
        bool(mine)
        and len(mine) == len(theirs)
        and all(a is b for (a, _), (b, _) in zip(mine, theirs))
    )


def _same_prov(prov: Any, other: Any) -> bool:
    """The same record (or a copy of it: :meth:`Prov.shallow`), or the same op at the same
    line of the same inputs."""
    if prov.made == other.made:
        return True
    return (
        prov.op == other.op
        and prov.line == other.line
        and prov.path == other.path
        and bool(prov.parents)
        and len(prov.parents) == len(other.parents)
        and all(a.made == b.made for a, b in zip(prov.parents, other.parents))
    )


def _node_dim(node: Any, kept: bool = False) -> Optional[tuple[int, str]]:
    """The one dim a reduction's node saved (``SumBackward1._saved_dim``), unless it kept it
    (``kept``: kept or not)."""
    try:
        dims, keepdim = node._saved_dim, node._saved_keepdim
    except (AttributeError, RuntimeError):
        return None
    if keepdim and not kept:
        return None
    dims = dims if isinstance(dims, (tuple, list)) else (dims,)
    if len(dims) != 1 or not isinstance(dims[0], int):
        return None
    dim = dims[0] - _WORD_BITS if dims[0] >= _WORD_BITS // 2 else dims[0]  # (-1 is unsigned)
    return dim, type(node).__name__.split("Backward")[0].lower()


def reduced_dim(tensor: Any, provenance: Any, kept: bool) -> Optional[int]:
    """The dim (from 0, of the reduced tensor's rank) a reduction removed, or kept
    (``kept``), to make ``tensor``; None when not known (a line with several reductions is
    read for the one that kept, or did not keep, its dim)."""
    node = reduction_node(tensor.grad_fn)
    if node is not None:
        found = _node_dim(node, kept=True)
        if found is None or bool(getattr(node, "_saved_keepdim", False)) != kept:
            return None
        dim: Optional[int] = found[0]
    else:
        prov = reduction_prov(provenance.lookup(tensor)) if provenance is not None else None
        written = _line_dims(prov.path, prov.line, prov.op) if prov is not None else set()
        # (a call with no literal dim, `table.sum()` of everything, is not this one)
        matching = {d for d, keeps in written if keeps == kept and d is not None}
        dim = matching.pop() if len(matching) == 1 else None
    if dim is None:
        return None
    rank = tensor.ndim if kept else tensor.ndim + 1
    dim = dim + rank if dim < 0 else dim
    return dim if 0 <= dim < rank else None


@functools.lru_cache(maxsize=1024)
def _line_dim(path: str, line: int, reduction: str) -> Optional[int]:
    """The one dim the statement at ``line`` removes with ``reduction`` (:func:`written_dims`,
    read and parsed once per line); None when it removes none or several."""
    dims = written_dims(naming.statement_text(path, line), reduction)
    removed = {d for d, keeps in dims if not keeps}
    return removed.pop() if len(removed) == 1 and len(dims) == 1 else None


@functools.lru_cache(maxsize=1024)
def _line_dims(path: str, line: int, reduction: str) -> frozenset[tuple[Optional[int], bool]]:
    return frozenset(written_dims(naming.statement_text(path, line), reduction))


#: where a reduction's method takes its dim when it is not the first argument (``x.norm(p,
#: dim)``); one more for ``torch.norm(x, p, dim)``
_DIM_POSITION = {"norm": 1}


def written_dims(statement: str, reduction: str) -> set[tuple[Optional[int], bool]]:
    """``(dim, keeps it)`` of each call of ``reduction`` in ``statement``: the dim as an
    integer literal (``x.sum(1)``, ``x.sum(dim=-1)``, ``torch.sum(x, 1)``, ``x.norm(2, 1)``;
    None when none is), and whether it passes ``keepdim`` set."""
    try:
        tree = ast.parse(naming.without_comments(statement).strip())
    except (SyntaxError, ValueError):
        return set()
    found = set()
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
            continue
        if call.func.attr != reduction:
            continue
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        keep = keywords.get("keepdim")
        keeps = keep is not None and not (isinstance(keep, ast.Constant) and keep.value is False)
        on_module = isinstance(call.func.value, ast.Name) and call.func.value.id == "torch"
        positional = call.args[1:] if on_module else call.args
        position = _DIM_POSITION.get(reduction, 0)
        written = keywords.get("dim", keywords.get("axis"))
        if written is None and len(positional) > position:
            written = positional[position]
        found.add((_literal_int(written), keeps))
    return found


def _literal_int(node: Optional[ast.expr]) -> Optional[int]:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _literal_int(node.operand)
        return -inner if inner is not None else None
    return None
