"""What kind of operation a torch function is, decided once per function and cached.

The engine's per-op path looks a function up here and runs only the rule checks that can apply
to it: most functions are "generic" (device check, provenance), a few are copies to the host,
in-place writes, elementwise binaries, backward calls — and attribute reads like ``t.grad`` or
``t.shape`` pass straight through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

#: tensor attributes whose read is metadata only (never a new tensor worth watching)
_METADATA_ATTRS = frozenset(
    [
        "grad",
        "shape",
        "device",
        "dtype",
        "requires_grad",
        "is_leaf",
        "grad_fn",
        "_version",
        "names",
        "layout",
        "ndim",
        "is_cuda",
        "is_cpu",
        "is_sparse",
        "is_quantized",
        "is_meta",
        "is_mps",
        "is_xpu",
        "is_mkldnn",
        "is_nested",
        "is_sparse_csr",
        "_base",
        "_cdata",
        "__dict__",
        "output_nr",
        "itemsize",
        "nbytes",
        "_grad_fn",
        "_backward_hooks",
        "retains_grad",
        "is_complex",
        "_post_accumulate_grad_hooks",
    ]
)

#: methods that read metadata or format, never compute
_METADATA_METHODS = frozenset(
    [
        "dim",
        "size",
        "numel",
        "stride",
        "element_size",
        "is_floating_point",
        "is_complex",
        "is_contiguous",
        "data_ptr",
        "get_device",
        "storage_offset",
        "untyped_storage",
        "storage",
        "nelement",
        "ndimension",
        "__len__",
        "__hash__",
        "__format__",
        "__repr__",
        "__str__",
        "__reduce_ex__",
        "__deepcopy__",
        "__getstate__",
        "__setstate__",
        "_is_view",
        "is_set_to",
        "has_names",
        "is_signed",
        "is_inference",
        "is_pinned",
        "is_shared",
        "__contains__",
        "__iter__",
        "__array__",
        "__dir__",
        "register_hook",
        "register_post_accumulate_grad_hook",
        "retain_grad",
        "requires_grad_",
        "_typed_storage",
        "__torch_function__",
        "is_nonzero",
        "_has_compatible_shallow_copy_type",
        "is_same_size",
        "_is_same_size",
        "is_set_to",
    ]
)

#: in-place names that change autograd state or memory placement, not values
_NOT_VALUE_WRITES = frozenset(
    [
        "requires_grad_",
        "share_memory_",
        "detach_",
        "retain_grad",
        "record_stream",
        "rename_",
        "__setstate__",
    ]
)

#: copies to the host that ``leaves-device`` watches (``.to`` and ``copy_`` decided per call)
HOST_COPIES = frozenset(["cpu", "numpy", "tolist", "__array__"])
SCALAR_READS = frozenset(["item", "__float__", "__int__", "__bool__", "__index__", "__complex__"])

#: Python's augmented assignments (``t += 1``): in-place; named explicitly, since other dunders
#: begin with ``__i`` too (``~mask`` is ``__invert__``, which makes a new tensor)
AUGMENTED = frozenset(
    (
        "__iadd__",
        "__isub__",
        "__imul__",
        "__imatmul__",
        "__itruediv__",
        "__idiv__",
        "__ifloordiv__",
        "__imod__",
        "__ipow__",
        "__ilshift__",
        "__irshift__",
        "__iand__",
        "__ior__",
        "__ixor__",
    )
)

#: elementwise ops with two or more tensor operands that broadcast silently
_ELEMENTWISE = frozenset(
    [
        "add",
        "sub",
        "mul",
        "div",
        "true_divide",
        "floor_divide",
        "remainder",
        "fmod",
        "pow",
        "atan2",
        "hypot",
        "maximum",
        "minimum",
        "fmax",
        "fmin",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "logical_and",
        "logical_or",
        "logical_xor",
        "bitwise_and",
        "bitwise_or",
        "bitwise_xor",
        "subtract",
        "multiply",
        "divide",
        "where",
        "lerp",
        "addcmul",
        "addcdiv",
        "copysign",
        "xlogy",
        "__add__",
        "__radd__",
        "__sub__",
        "__rsub__",
        "__mul__",
        "__rmul__",
        "__truediv__",
        "__rtruediv__",
        "__floordiv__",
        "__rfloordiv__",
        "__mod__",
        "__rmod__",
        "__pow__",
        "__rpow__",
        "__and__",
        "__or__",
        "__xor__",
        "__eq__",
        "__ne__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "mse_loss",
        "l1_loss",
        "smooth_l1_loss",
        "huber_loss",
    ]
)

#: ops that move or copy tensors between devices on purpose
_DEVICE_MOVES = frozenset(
    [
        "to",
        "cpu",
        "cuda",
        "copy_",
        "type_as",
        "__getitem__",
        "__setitem__",
        "index_put_",
        "index_put",
        "new_tensor",
        "tensor",
        "as_tensor",
        "set_",
        "__array__",
        "numpy",
        "tolist",
        "item",
        "new_zeros",
        "new_ones",
        "new_empty",
        "new_full",
        "_foreach_copy_",
        "pin_memory",
    ]
)

BACKWARD_CALLS = frozenset(("backward", "grad"))


@dataclass(frozen=True)
class OpInfo:
    """What the engine needs to know about one torch function."""

    name: str
    #: metadata read: the engine does nothing at all
    passthrough: bool = False
    #: writes into its first tensor argument
    inplace: bool = False
    elementwise: bool = False
    #: mixing devices is its purpose (``.to``, indexing with a CPU index...)
    device_move: bool = False
    #: ``Tensor.backward`` / ``torch.autograd.backward`` / ``torch.autograd.grad``
    backward: bool = False


_CACHE: dict[Any, OpInfo] = {}


#: the module of the profiler's ops (``torch.ops.profiler._record_function_enter_new``...): marks
#: in a trace, with no tensor in or out
_PROFILER_OPS = "torch._ops.profiler"


def op_name(func: Callable[..., Any]) -> str:
    """A readable name: ``add``, ``data`` (attribute read), ``masked_scatter_``..."""
    name = getattr(func, "__name__", None) or repr(func)
    if name in ("__get__", "__set__"):
        owner = getattr(func, "__self__", None)
        attr = getattr(owner, "__name__", None)
        if attr:
            return attr if name == "__get__" else f"{attr}.__set__"
    return name


def classify(func: Callable[..., Any]) -> OpInfo:
    info = _CACHE.get(func)
    if info is None:
        info = _CACHE[func] = _classify(func)
    return info


def _classify(func: Callable[..., Any]) -> OpInfo:
    name = op_name(func)
    raw = getattr(func, "__name__", "")
    module = getattr(func, "__module__", "") or ""
    if raw == "__get__" and name in _METADATA_ATTRS:
        return OpInfo(name, passthrough=True)
    if raw == "__set__" or name in _METADATA_METHODS:
        return OpInfo(name, passthrough=True)
    if module == _PROFILER_OPS:  # record_function's marks (each optimizer.step() sets two)
        return OpInfo(name, passthrough=True)
    if name in BACKWARD_CALLS and (name == "backward" or "autograd" in module):
        return OpInfo(name, backward=True)
    augmented = name in AUGMENTED
    inplace = (
        augmented
        or name == "__setitem__"
        or (name.endswith("_") and not name.endswith("__") and name not in _NOT_VALUE_WRITES)
    )
    base = name
    if augmented:
        base = "__" + name[3:]
    elif inplace and name.endswith("_") and not name.startswith("_foreach"):
        base = name[:-1]
    return OpInfo(
        name,
        inplace=inplace,
        elementwise=base in _ELEMENTWISE,
        device_move=name in _DEVICE_MOVES or name in HOST_COPIES,
    )
