"""``broadcast``: an elementwise op silently broadcasts inputs of different ranks to more
elements than any input has, as ``(4,) - (4, 1)`` becoming ``(4, 4)``.

No error, just a wrong result (TorchSnooper's ``Linear(2, 1)`` regression whose loss stops at
1.5). The mistake has a signature: the two sides hold the *same* size, meant to line up
elementwise (a ``(B, 1)`` prediction against ``(B,)`` targets), and broadcasting spreads one
side's size-1 (or missing) dim over that size. So an op is reported only when an input is
stretched along a dim to a size it already has elsewhere. Not reported: a bias add ``(64, 10) +
(10,)`` (keeps the larger input's size), scalars and 0-dim tensors, outer products of equal ranks,
outer products of different sizes (the sinusoidal positional encoding's ``position (L, 1) *
div_term (d/2,)``), and size-1 dims made on purpose: with ``[:, None]`` / ``unsqueeze`` on the
op's line, or by ``unsqueeze`` / ``reshape`` / ``view`` / ``None`` indexing on an earlier line
(indexing without ``None`` keeps the size-1 dims of what it indexes: ``Y[idx]`` of an ``(N, 1)``
column is no intent). Yet a division of lower-rank values by such a column is reported: masked
mean pooling ``x.sum(1) / lengths[:, None]`` written for ``(B, T, D)`` features and run on a
``(B, T)`` ``x`` divides every row's total by every row's length.

A second mistake broadcasts without growing: a total over a dim after the first, without
``keepdim``, divided back into (or subtracted from) the tensor it was taken of. ``cm /
cm.sum(1)`` lines the row totals up with the columns; PyTorch raises only when the sizes differ,
and a square matrix (a confusion matrix, an adjacency matrix, a batch of one ``(1, T, T)``
attention) has them equal. Which dim a total removed is read from its autograd node or its line
(:mod:`tensor_dap.agent.reduction_dims`). The row and column totals of one table multiplied (a
chi-square test's expected counts) are an outer product meant.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any, Optional

import torch

from tensor_dap import catalog
from tensor_dap.agent import naming, reduction_dims
from tensor_dap.agent.naming import source_line
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.rules import RANKS_DIFFER, Report
from tensor_dap.agent.rules.hooks import Args, Kwargs
from tensor_dap.agent.storage import storage_key

RULE = catalog.rule("broadcast")

#: before() is None unless tensor operands of different non-zero ranks meet (see before)
SCREEN = RANKS_DIFFER

_Tensor = torch.Tensor
_EXPLICIT = ("None]", "unsqueeze", "None,", "[None", "expand", "outer", "einsum")
#: ops that make a size-1 dim on purpose: an input made by one of them is meant to broadcast
_RESHAPING = frozenset(
    ["unsqueeze", "unsqueeze_", "reshape", "view", "__getitem__", "expand", "unflatten", "outer"]
)


def applies(op: OpInfo) -> bool:
    return (op.elementwise and not op.inplace) or op.name in _IN_PLACE_ARITHMETIC


#: in-place arithmetic: never stretched past its target, but ``cm /= cm.sum(1)`` lines a
#: total up with the wrong dims as ``cm / cm.sum(1)`` does (:func:`_misaligned`)
_IN_PLACE_ARITHMETIC = frozenset(("div_", "__idiv__", "__itruediv__", "sub_", "__isub__"))


def before(op: OpInfo, args: Args, kwargs: Kwargs, caller: Any, state: Any) -> Any:
    # the hot path (every elementwise op): numbers and 0-dim tensors never broadcast anything,
    # and equal ranks are not this rule's business; only then are shapes looked at
    first_rank = 0
    for arg in args:
        if isinstance(arg, _Tensor):
            rank = arg.ndim
            if rank and rank != first_rank:
                if first_rank:
                    return _check(op, args, caller, state)
                first_rank = rank
    return None


_INTENDED = "broadcast.intended-sites"


def _check(op: OpInfo, args: Args, caller: Any, state: Any) -> Optional[Report]:
    """Inputs of different ranks: report when the result has more elements than any input
    and an input is stretched to a size it already has (the mistake's signature).

    A call site once seen broadcasting inputs made on purpose stays intended: provenance is
    sampled after a site's first runs, so a later run may not know where its inputs came from.
    Except a division of lower-rank values by a column made on purpose (:func:`_per_row`).
    """
    tensors = [a for a in args if isinstance(a, _Tensor) and a.dim()]
    shapes = [tuple(t.shape) for t in tensors]
    if not all(type(size) is int for shape in shapes for size in shape):
        return None  # a jagged tensor's ragged size (a nested int) has no order to judge
    try:
        result = tuple(torch.broadcast_shapes(*shapes))  # type: ignore[no-untyped-call]
    except RuntimeError:
        return None  # PyTorch raises its own error
    if math.prod(result) <= max(math.prod(s) for s in shapes):
        return _misaligned(op, tensors, result, state)
    if not any(_stretched_to_own_size(shape, result) for shape in shapes):
        return None
    intended = state.rule_state.setdefault(_INTENDED, set()) if state is not None else set()
    site = (id(caller.f_code), caller.f_lasti) if caller is not None else None
    if site in intended:
        return None
    if _marginals(tensors, state):
        intended.add(site)
        return None
    made = [_made_to_broadcast(t, shape, result, state) for t, shape in zip(tensors, shapes)]
    if _per_row(op, args, tensors, made, state):
        return Report(tensors=tensors, message=_per_row_message(result))
    # (a column indexed from one made on purpose, against a prediction that requires grad, is
    # a loss's target: `depth_map - depths[k][sel]` of targets reshaped (-1, 1) once)
    loss_like = any(t.requires_grad for t in tensors) and _INHERITED in made
    if _DIRECT in made or (_INHERITED in made and not loss_like):
        intended.add(site)
        return None
    return Report(tensors=tensors, message=_message(result))


def _marginals(tensors: list[Any], state: Any) -> bool:
    """Whether the two operands are reductions of one table over different dims: the row and
    column totals of a contingency table, ``table.sum(1, keepdim=True) * table.sum(0)`` (a
    chi-square test's expected counts), an outer product whatever the sizes."""
    if len(tensors) != 2 or state is None:
        return False
    one, other = (reduction_dims.reduced_from(t, state.provenance) for t in tensors)
    if not reduction_dims.same_source(one, other):
        return False
    # (over the same dim, `x.logsumexp(1, keepdim=True) - x.amax(1)`, it is the mistake)
    # (the one of the table's rank kept its dim: `table.sum(1, keepdim=True)`)
    rank = max(t.ndim for t in tensors)
    dims = [reduction_dims.reduced_dim(t, state.provenance, t.ndim == rank) for t in tensors]
    return None not in dims and dims[0] != dims[1]


def _misaligned(
    op: OpInfo, tensors: list[Any], result: tuple[int, ...], state: Any
) -> Optional[Report]:
    """``cm / cm.sum(1)``, ``x - x.mean(-1)``: a value reduced over a non-leading dim, without
    ``keepdim``, meets a tensor of the shape it was reduced from. Broadcasting lines its dims up
    from the right, with the dims after the first, so each value meets the total of another
    row; it raises only when the sizes differ, and a square matrix (a confusion matrix, an
    adjacency matrix, ``(1, T, T)`` attention) has them equal. A total over dim 0 lines up
    right (``cm / cm.sum(0)`` is a column normalization) and is left alone."""
    if op.name not in _ARITHMETIC or len(tensors) != 2:
        return None
    full, reduced = sorted(tensors, key=lambda t: -t.ndim)
    shape = tuple(full.shape)
    if full.ndim != reduced.ndim + 1 or shape != result:
        return None
    # (the shapes first: a bias or a mean over dim 0 of a matrix that is not square has no
    # other dim whose removal leaves the operand's shape, and costs no more)
    if not _removal_misaligns(shape, tuple(reduced.shape)):
        return None
    removed = reduction_dims.removed_dim(reduced, full, state.provenance if state else None)
    if removed is None or removed[0] == 0:
        return None
    dim, reduction = removed
    if tuple(reduced.shape) != shape[:dim] + shape[dim + 1 :]:
        return None
    if all(size == 1 for size in shape[:dim]):  # (one row: its total lines up either way)
        return None
    return Report(tensors=[full, reduced], message=_misaligned_message(dim, reduction))


def _removal_misaligns(shape: tuple[int, ...], reduced: tuple[int, ...]) -> bool:
    """Whether removing some dim after the first from ``shape`` leaves ``reduced``, with a
    size above 1 before it (what a misaligned total's shapes must be)."""
    return any(
        shape[:dim] + shape[dim + 1 :] == reduced and any(size > 1 for size in shape[:dim])
        for dim in range(1, len(shape))
    )


#: what normalizes or centers by a reduction (out of place and in place); a product with a
#: vector along the columns is meant as often as not (``adj * deg_inv_sqrt``, the right-hand
#: ``D^-1/2`` of a symmetrically normalized adjacency)
_ARITHMETIC = _IN_PLACE_ARITHMETIC | frozenset(
    ("div", "__truediv__", "true_divide", "divide", "sub", "__sub__", "__rsub__", "subtract")
)

#: what a reduction makes, in the message (op name, or its node's name lower-cased)
_REDUCED_WHAT = {
    "sum": "total",
    "nansum": "total",
    "mean": "mean",
    "nanmean": "mean",
    "max": "maximum",
    "amax": "maximum",
    "min": "minimum",
    "amin": "minimum",
    "std": "standard deviation",
    "var": "variance",
    "prod": "product",
    "logsumexp": "log-sum-exp",
    "median": "median",
    "nanmedian": "median",
    "count_nonzero": "count",
}


def _misaligned_message(dim: int, reduction: str) -> Any:
    what = _REDUCED_WHAT.get(reduction, "norm" if "norm" in reduction else "reduction")

    def build(described: list[Any], expression: str) -> str:
        full, reduced = sorted(described, key=lambda d: -len(d.shape))
        name = _UNNAMED.sub(_augmented_value(expression), reduced.name)
        rank = len(full.shape)
        if rank == 2:
            held = f"one {what} per row of {full.name} {full.shape_text} (over dim 1)"
            lined = f"{full.name}'s columns"
            each = f"each value meets another row's {what}"
        else:
            held = (
                f"the {what} of {full.name} {full.shape_text} over dim {dim}, one per position "
                "of its other dims"
            )
            lined = f"dims 1–{rank - 1} of {full.name} instead of the dims it kept"
            each = f"each value meets the {what} of another position"
        return (
            f"`{expression}`: {name} {reduced.shape_text} holds {held}, but "
            f"broadcasting lines it up with {lined}: {each}, with no error because the sizes "
            f"happen to match. Keep the reduced dim: {_keepdim_text(name, dim)}."
        )

    return build


#: the name naming.describe gives an operand it cannot name
_UNNAMED = re.compile(r"^operand \d+$")


def _augmented_value(expression: str) -> str:
    """What ``cm /= cm.sum(1)`` divides by, as written (an in-place op's operand has no name
    of its own); ``the reduced operand`` when the expression is not such a statement."""
    statement = naming.parsed_statement(expression)
    if isinstance(statement, ast.AugAssign):
        return ast.get_source_segment(expression.strip(), statement.value) or ast.unparse(
            statement.value
        )
    return "the reduced operand"


def _keepdim_text(name: str, dim: int) -> str:
    """``cm.sum(1, keepdim=True)`` for an operand written as the reduction's call; else the
    operand unsqueezed where the dim was: ``row_totals.unsqueeze(1)``."""
    unsqueezed = f"`{_operand(name)}.unsqueeze({dim})`"
    statement = naming.parsed_statement(name)
    call = statement.value if isinstance(statement, ast.Expr) else None
    if (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in reduction_dims.REDUCTIONS
        and name.endswith(")")
        and not any(k.arg == "keepdim" for k in call.keywords)
    ):
        return f"`{name[:-1]}, keepdim=True)` (or {unsqueezed})"
    return unsqueezed


#: division ops, and the reflected one (``self`` is the divisor)
_DIVISIONS = frozenset(["div", "__truediv__", "true_divide", "divide"])
_REFLECTED_DIVISIONS = frozenset(["__rtruediv__", "__rdiv__"])


def _per_row(op: OpInfo, args: Args, tensors: list[Any], made: list[str], state: Any) -> bool:
    """Whether the op divides values of a lower rank by a column whose size-1 dim was made on
    purpose (``x.sum(1) / lengths[:, None]`` with ``x`` ``(B, T)``: ``(B,)`` by ``(B, 1)`` is
    ``(B, B)``, every row's total divided by every row's length). The ``[:, None]`` was written
    for a feature dim the dividend lacks (masked mean pooling of ``(B, T, D)`` copied onto
    ``(B, T)``); an outer division by a column is not what anyone writes on purpose (a tensor
    divided by a column of its own, ``t / t[:, None]``, is left alone)."""
    if op.name in _DIVISIONS:
        dividend, divisor = args[0], args[1] if len(args) > 1 else None
    elif op.name in _REFLECTED_DIVISIONS:
        divisor, dividend = args[0], args[1] if len(args) > 1 else None
    else:
        return False
    if not (isinstance(dividend, _Tensor) and isinstance(divisor, _Tensor)):
        return False
    if dividend.ndim >= divisor.ndim or divisor.shape[-1] != 1:
        return False
    on_purpose = next((m for t, m in zip(tensors, made) if t is divisor), _NOT)
    if on_purpose == _NOT or not _reduced(dividend, state):
        return False
    own = storage_key(dividend)
    return own is None or own != storage_key(divisor)


def _reduced(tensor: Any, state: Any) -> bool:
    """Whether ``tensor`` was made by a reduction over a dim (``x.sum(1)``), possibly cast
    after: the dim the column was written for is the one it removed. ``torch.arange(T) /
    lengths[:, None]`` (each position over each length) is an outer division made on purpose."""
    prov = state.provenance.lookup(tensor) if state is not None else None
    for _ in range(3):
        if prov is None:
            return False
        if prov.op in reduction_dims.REDUCTIONS:
            return True
        if prov.op not in _SAME_SHAPE or not prov.parents:
            return False
        prov = prov.parents[0]
    return False


def _stretched_to_own_size(shape: tuple[int, ...], result: tuple[int, ...]) -> bool:
    """Whether broadcasting spreads ``shape`` along a dim to a size ``shape`` already has:
    ``(N,)`` or ``(N, 1)`` against ``(N, N)``, where ``(8,)`` against ``(50, 8)`` is not."""
    padded = (1,) * (len(result) - len(shape)) + shape
    own = set(shape)
    return any(mine == 1 and size > 1 and size in own for mine, size in zip(padded, result))


#: ops whose result has their input's shape: what made the input's size-1 dims made theirs
_SAME_SHAPE = frozenset(
    ("float", "double", "half", "bfloat16", "long", "int", "to", "type", "clone", "contiguous")
    + ("detach", "cpu", "cuda")
)
#: how a tensor's stretched size-1 dim came (:func:`_made_to_broadcast`)
_DIRECT, _INHERITED, _NOT = "direct", "inherited", "not"


def _made_to_broadcast(
    tensor: Any, shape: tuple[int, ...], result: tuple[int, ...], state: Any
) -> str:
    """Whether a size-1 dim of ``tensor`` that broadcasting stretches was made on purpose
    upstream (``unsqueeze``, ``reshape``, ``[:, None]``...: ``position (L, 1)`` of a positional
    encoding, ``a = x.unsqueeze(1)`` of pairwise differences): :data:`_DIRECT`; by indexing a
    tensor made so (``position[:T]``): :data:`_INHERITED`; else :data:`_NOT`."""
    aligned = result[len(result) - len(shape) :]
    stretched = any(mine == 1 and size > 1 for mine, size in zip(shape, aligned))
    prov = state.provenance.lookup(tensor) if stretched and state is not None else None
    return _NOT if prov is None else _on_purpose(prov)


def _on_purpose(prov: Any, depth: int = 3) -> str:
    """How the op ``prov`` records made its size-1 dims (see :func:`_made_to_broadcast`).
    Indexing keeps the size-1 dims of what it indexes (``Y[idx]``, ``Y[i:i + bs]`` of an
    ``(N, 1)`` column) unless its index makes one (``x[:, None]``, a column sliced
    ``boxes[:, 0:1]``)."""
    if prov.op in _SAME_SHAPE and depth > 0:  # `arange(L).unsqueeze(1).float()`
        found = {_on_purpose(p, depth - 1) for p in prov.parents}
        return next((kind for kind in (_DIRECT, _INHERITED) if kind in found), _NOT)
    if prov.op not in _RESHAPING:
        return _NOT
    if prov.op != "__getitem__":
        return _DIRECT
    text = source_line(prov.path, prov.line)
    if _NEW_AXIS.search(text) or any(_unit_width(*found) for found in _SLICE.findall(text)):
        return _DIRECT
    if depth > 0 and any(_on_purpose(p, depth - 1) != _NOT for p in prov.parents):
        return _INHERITED
    return _NOT


#: an index adding a dim: ``x[:, None]``, ``x[..., np.newaxis]``
_NEW_AXIS = re.compile(r"\[[^\]]*\b(None|newaxis)\b")
#: a slice ``start:stop`` (``0:1``, ``-1:``, ``k:k + 1``)
_SLICE = re.compile(r"(?<![\w.)\]])(-?[\w.]*)\s*:\s*(-?[\w.]*(?:\s*\+\s*1)?)(?=\s*[\],])")


def _unit_width(start: str, stop: str) -> bool:
    """Whether ``start:stop`` takes one element: ``0:1``, ``:1``, ``-1:``, ``k:k + 1``."""
    stop = stop.replace(" ", "")
    if stop == f"{start}+1" and start:
        return True
    if start in ("", "0") and stop == "1":
        return True
    if start == "-1" and stop == "":
        return True
    try:
        return int(stop) - int(start) == 1
    except ValueError:
        return False


def _message(result: tuple[int, ...]) -> Any:
    def build(described: list[Any], expression: str) -> Any:
        if any(marker in expression for marker in _EXPLICIT):
            return None
        parts = ", ".join(f"{d.name} {d.shape_text}" for d in described)
        small = min(described, key=lambda d: len(d.shape))
        big = max(described, key=lambda d: len(d.shape))
        dim = _unit_dim(tuple(big.shape), tuple(small.shape))
        return (
            f"`{expression}`: {parts} broadcast to {result}, more elements than any input. "
            f"If they should match, reshape one (e.g. {_operand(big.name)}.squeeze({dim}) or "
            f"{_operand(small.name)}.unsqueeze({dim})); write [:, None] to make an outer op "
            "explicit."
        )

    return build


def _unit_dim(big: tuple[int, ...], small: tuple[int, ...]) -> str:
    """The size-1 dim of ``big`` whose removal leaves ``small`` (a segmentation target's
    channel: ``(16, 1, 32, 32)`` against ``(16, 32, 32)`` is dim 1), written as the fix
    writes it; the last (``-1``) when none is, or it is that."""
    for dim, size in enumerate(big):
        if size == 1 and big[:dim] + big[dim + 1 :] == small:
            return "-1" if dim == len(big) - 1 else str(dim)
    return "-1"


def _per_row_message(result: tuple[int, ...]) -> Any:
    def build(described: list[Any], expression: str) -> str:
        dividend, divisor = sorted(described, key=lambda d: len(d.shape))[:2]
        column = _COLUMN.fullmatch(divisor.name)
        plain = column.group(1) if column else f"{_operand(divisor.name)}.squeeze(-1)"
        return (
            f"`{expression}`: {dividend.name} {dividend.shape_text} divided by "
            f"{divisor.name} {divisor.shape_text} broadcasts to {result}: each value is "
            f"divided by every row's divisor, not by its own. The dividend has no dim for the "
            f"size-1 dim of {divisor.name} to line up with: divide by {plain}, or keep the dim "
            "the dividend's reduction removed (.sum(dim, keepdim=True))."
        )

    return build


#: a column made from a name: ``lengths[:, None]``, ``n.unsqueeze(-1)``, ``n.view(-1, 1)``
_COLUMN = re.compile(
    r"(.+?)(?:\[\s*:\s*,\s*None\s*\]|\[\s*\.\.\.\s*,\s*None\s*\]"
    r"|\.unsqueeze\(\s*(?:-1|1)\s*\)|\.(?:view|reshape)\(\s*-1\s*,\s*1\s*\))"
)


def _operand(text: str) -> str:
    """``text`` as the operand of a method call: ``Y[idx]`` as it is, ``(X[idx] @ w)``."""
    return text if _ATOM.fullmatch(text) else f"({text})"


#: a name, attribute, call or item chain: ``y``, ``batch.y``, ``Y[i:i + 64]``, ``torch.ones(4)``
_ATOM = re.compile(r"[A-Za-z_][\w.]*(\([^()]*\)|\[[^\[\]]*\])*")
