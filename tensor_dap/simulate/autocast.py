"""``torch.autocast("cuda")`` under the simulation: the ops CUDA's autocast runs in lower
precision run in it here too.

Why: mixed-precision bugs are CUDA bugs too. Under autocast a ``linear`` returns float16 on a
GPU, so ``buffer[idx] = model(x)`` into a float32 buffer fails there ("Index put requires the
source and destination dtypes match"), a float16 activation overflows to Inf, and the hints and
VARIABLES say ``f16``. The simulated device's tensors are CPU tensors under a wrapper, which
CUDA's autocast (a dispatch key of CUDA tensors) never sees; without this they stay float32 and
those bugs do not show.

How: the simulation's mode asks, per op, whether autocast is on for ``"cuda"`` (the program's
``torch.autocast("cuda")`` / ``torch.cuda.amp.autocast()`` set it, as on a GPU) and casts the
floating-point CUDA tensors among the op's arguments as CUDA's autocast does, following its op
lists (https://pytorch.org/docs/stable/amp.html#cuda-ops-that-can-autocast-to-float16):
matmuls, convolutions and ``linear`` run in the autocast dtype; reductions, losses,
normalisations and pointwise ops that need range run in float32; ops that mix dtypes promote to
the widest. The casts happen at the torch-function level, inside the simulation's mode, so
autograd sees ordinary ``to()`` casts (gradients come back in each parameter's own dtype) and
the watch above sees the user's call.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

__all__ = ["autocast_arguments"]

_Tensor = torch.Tensor
_is_enabled = torch.is_autocast_enabled
_dtype_of = torch.get_autocast_dtype
_FLOAT32 = torch.float32

#: CUDA's autocast runs these in the autocast dtype (float16 by default)
LOWER_PRECISION = frozenset(
    (
        "__matmul__", "__rmatmul__", "matmul", "mm", "mv", "bmm", "addmm", "addmv", "addr",
        "addbmm", "baddbmm", "chain_matmul", "multi_dot", "linear", "prelu",
        "conv1d", "conv2d", "conv3d", "conv_tbc",
        "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
        "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
        "scaled_dot_product_attention",
    )
)  # fmt: skip

#: ... these in float32
FLOAT32 = frozenset(
    (
        "__pow__", "__rpow__", "__rdiv__", "__rtruediv__", "pow", "acos", "asin", "cosh",
        "sinh", "tan", "erfinv", "exp", "expm1", "log", "log10", "log1p", "log2",
        "reciprocal", "rsqrt", "cumprod", "cumsum", "prod", "sum", "norm", "renorm", "dist",
        "cdist", "pdist", "softmax", "softmin", "log_softmax", "softplus", "layer_norm",
        "group_norm", "normalize", "cosine_similarity", "cross_entropy", "nll_loss",
        "binary_cross_entropy_with_logits", "mse_loss", "l1_loss", "smooth_l1_loss",
        "huber_loss", "kl_div", "poisson_nll_loss", "margin_ranking_loss",
        "hinge_embedding_loss", "cosine_embedding_loss", "soft_margin_loss",
        "multilabel_margin_loss", "multilabel_soft_margin_loss", "multi_margin_loss",
        "triplet_margin_loss",
    )
)  # fmt: skip

#: ... these in the widest floating dtype among their inputs
WIDEST = frozenset(
    (
        "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sample",
        "index_put", "scatter_add", "tensordot", "cat", "concat",
        "concatenate", "stack",
    )
)  # fmt: skip


def autocast_arguments(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """``args`` cast as autocast("cuda") would for ``func``, when it is on (else unchanged)."""
    if not _is_enabled("cuda"):
        return args
    name = getattr(func, "__name__", "")
    if name in LOWER_PRECISION:
        dtype = _dtype_of("cuda")
    elif name in FLOAT32:
        dtype = _FLOAT32
    elif name in WIDEST:
        widest = _widest(_cuda_floats(args))
        if widest is None:
            return args
        dtype = widest
    else:
        return args
    return tuple(_cast(a, dtype) for a in args)


def _is_cuda_float(value: Any) -> bool:
    return isinstance(value, _Tensor) and value.is_cuda and value.is_floating_point()


def _cuda_floats(args: Iterable[Any]) -> list[Any]:
    found: list[Any] = []
    for arg in args:
        if isinstance(arg, (list, tuple)):
            found.extend(a for a in arg if _is_cuda_float(a))
        elif _is_cuda_float(arg):
            found.append(arg)
    return found


def _widest(tensors: list[Any]) -> Any:
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) < 2:
        return None
    widest = next(iter(dtypes))
    for dtype in dtypes:
        widest = torch.promote_types(widest, dtype)
    return widest


def _cast(value: Any, dtype: Any) -> Any:
    if _is_cuda_float(value):
        return value if value.dtype == dtype else value.to(dtype)
    if isinstance(value, (list, tuple)) and any(_is_cuda_float(v) for v in value):
        return type(value)(_cast(v, dtype) for v in value)
    return value
