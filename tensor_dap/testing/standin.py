"""A stand-in accelerator that runs on the CPU: tensors that *say* they live on ``accel:0``.

Why it exists: CI and most developer machines have no GPU, yet tensor-dap's rules are about
tensors that leave an accelerator, meet tensors on another device, and so on.  This module gives
such code a device whose tensors report ``device(type='accel', index=0)`` (``is_cpu`` is False),
refuse ``.numpy()`` like CUDA tensors do, and raise PyTorch's own "Expected all tensors to be on
the same device" error when they meet non-scalar CPU tensors, while their data and all the
arithmetic stay on the CPU.  Autograd, ``torch.nn`` and ``torch.optim`` work through it unchanged.

How: the ``PrivateUse1`` dispatch key is renamed to ``accel`` and set up as a Python backend with
``torch.utils.backend_registration._setup_privateuseone_for_python_backend``; a wrapper tensor
subclass (``torch.Tensor._make_wrapper_subclass``) holds a plain CPU tensor, and its
``__torch_dispatch__`` unwraps, runs the aten op on the CPU and wraps tensor results again.  Ops
that reach the ``accel`` backend key itself (``torch.empty(..., device="accel")``, on which
``torch.zeros``/``ones``/``randn``/... build, and the copy inside ``torch.tensor(data,
device=...)``) are served by kernels registered with ``torch.library`` that do the same.

This relies on **private, experimental torch API** (the backend-registration helper, wrapper
subclasses, ``torch._tensor_str`` internals for printing); it is a test helper, never imported by
the agent.  Nothing happens at import: the process-wide setup (``PrivateUse1`` can be renamed
once per process) runs on the first call of :func:`accelerator_device`.

Known differences from a real GPU, kept on purpose or not worth the code:
- a 0-dim CPU tensor is accepted beside accelerator tensors by every op (CUDA accepts it in
  elementwise ops, where it matters); CPU index tensors are accepted by advanced indexing;
- ``tolist``/``numpy`` are Python methods here (the C ones refuse Python subclasses), so a
  ``TorchFunctionMode`` sees ``AcceleratorTensor.tolist`` rather than ``torch.Tensor.tolist``
  (same ``__name__``);
- the optimizers' foreach fast path is not taken (it is for plain ``torch.Tensor`` types);
- ``.cuda()``, autocast, pinned memory, streams, and ``torch.load(weights_only=True)`` of a
  saved stand-in tensor are not supported;
- backward runs in the calling thread (autograd multithreading is off in the thread that set
  the stand-in up), not on a device thread as CUDA's does: see ``_install``;
- the first op on a stand-in tensor costs about a second once per process: PyTorch's C++
  dispatcher imports ``torch.distributed.tensor`` to check every Python subclass for DTensor.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

import torch
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

__all__ = ["BACKEND_NAME", "AcceleratorTensor", "accelerator_device", "pick_device"]

BACKEND_NAME = "accel"
"""The device type of the stand-in; tensors report ``accel:0``."""

_CPU = torch.device("cpu")
_MARKER = "_tensor_dap_standin"

_aten = torch.ops.aten

# Metadata queries issued by C++ for a wrapper whose sizes and strides come from Python
# (``dispatch_sizes_strides_policy="sizes"``): answered straight from the CPU data.
_METADATA_OPS = frozenset(
    {
        _aten.sym_size.default,
        _aten.sym_stride.default,
        _aten.sym_numel.default,
        _aten.sym_storage_offset.default,
        _aten.dim.default,
        _aten.is_contiguous.default,
        _aten.is_contiguous.memory_format,
        _aten.is_strides_like_format.default,
        _aten.is_non_overlapping_and_dense.default,
    }
)

# Ops that legitimately take tensors on two devices (copies between host and device).
_COPY_OPS = frozenset(
    {
        _aten.copy_.default,
        _aten._to_copy.default,
        _aten._copy_from.default,
        _aten._copy_from_and_resize.default,
    }
)

# Advanced indexing accepts CPU index tensors for device tensors (as CUDA does); the indices
# are the second argument.
_INDEX_OPS = frozenset(
    {
        _aten.index.Tensor,
        _aten.index_put.default,
        _aten.index_put_.default,
        _aten._index_put_impl_.default,
        _aten._unsafe_index.Tensor,
        _aten._unsafe_index_put.default,
    }
)


class AcceleratorTensor(torch.Tensor):
    """A tensor on the stand-in device ``accel:0``; its data is the CPU tensor ``_elem``.

    Users never build one directly: create tensors with ``device=accelerator_device()`` or move
    them with ``.to(accelerator_device())`` as with any device.
    """

    _elem: torch.Tensor

    # Torch-function handling stays off for the subclass: results must not be converted into
    # the subclass by the default ``__torch_function__`` (a ``.cpu()`` result is a plain tensor).
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> AcceleratorTensor:
        # Sizes and strides are asked of Python (policy "sizes"), so that ops which resize or
        # restride their output in place (``torch.arange``'s ``out=`` kernel, ``resize_``,
        # ``unsqueeze_``, ``t_``) stay consistent with the CPU data.
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.size(),
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device=_device(),
            requires_grad=False,
            dispatch_sizes_strides_policy="sizes",
        )
        r._elem = elem
        return r

    # ``param.data = other`` (used by ``nn.Module._apply`` for ``model.double()`` and the like)
    # swaps the C++ tensor's metadata only; keep the CPU data in step with it.
    @property  # type: ignore[override]
    def data(self) -> torch.Tensor:
        return torch._C.TensorBase.data.__get__(self)  # type: ignore[attr-defined]

    @data.setter
    def data(self, new: torch.Tensor) -> None:
        torch._C.TensorBase.data.__set__(self, new)  # type: ignore[attr-defined]
        if isinstance(new, AcceleratorTensor):
            self._elem = new._elem

    # The C implementations of ``tolist`` and ``numpy`` refuse every Python-dispatch subclass, so
    # these two are done here, as a CUDA tensor would do them. A TorchFunctionMode active in the
    # user's code still sees one call (its ``func`` is this method, named like the original).

    def tolist(self) -> Any:  # type: ignore[override]
        """Copy to the host and return nested Python lists, as ``Tensor.tolist`` does."""
        if torch._C._has_torch_function_unary(self):
            return torch.overrides.handle_torch_function(AcceleratorTensor.tolist, (self,), self)
        return self._elem.tolist()

    def numpy(self, *, force: bool = False) -> Any:  # type: ignore[override]
        """Refuse like CUDA does, unless ``force=True`` (which copies to the host first)."""
        if torch._C._has_torch_function_unary(self):
            return torch.overrides.handle_torch_function(
                AcceleratorTensor.numpy, (self,), self, force=force
            )
        if not force:
            raise TypeError(
                f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to "
                "copy the tensor to host memory first."
            )
        return self.detach().cpu().numpy(force=True)

    def __format__(self, format_spec: str) -> str:
        if self.dim() == 0:
            return self.item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def __repr__(self, *, tensor_contents: Optional[str] = None) -> str:  # type: ignore[override]
        """``tensor([1., 2.], device='accel:0')``: what a CUDA tensor prints, with our device.

        ``torch._tensor_str`` would print the subclass name; this follows its dense path instead,
        formatting the CPU data directly.
        """
        if torch._C._has_torch_function_unary(self):
            return torch.overrides.handle_torch_function(
                AcceleratorTensor.__repr__, (self,), self, tensor_contents=tensor_contents
            )
        with torch._C.DisableTorchFunction(), torch.no_grad():
            elem = self._elem
            prefix = "tensor("
            indent = len(prefix)
            suffixes = [f"device='{self.device}'"]
            complex_default = (
                torch.cdouble if torch.get_default_dtype() == torch.double else torch.cfloat
            )
            default_dtypes = (torch.get_default_dtype(), complex_default, torch.int64, torch.bool)
            if tensor_contents is not None:
                body = tensor_contents
            elif elem.numel() == 0:
                body = "[]"
                if elem.dim() != 1:
                    suffixes.append(f"size={tuple(elem.shape)}")
                if elem.dtype != torch.get_default_dtype():
                    suffixes.append(f"dtype={elem.dtype}")
            else:
                if elem.dtype not in default_dtypes:
                    suffixes.append(f"dtype={elem.dtype}")
                body = torch._tensor_str._tensor_str(elem, indent)
            grad_fn = self.grad_fn
            if grad_fn is not None:
                name = type(grad_fn).__name__
                if name == "CppFunction":
                    name = grad_fn.name().rsplit("::", 1)[-1]
                suffixes.append(f"grad_fn=<{name}>")
            elif self.requires_grad:
                suffixes.append("requires_grad=True")
            text = torch._tensor_str._add_suffixes(prefix + body, suffixes, indent, False)
        if getattr(self, "_is_param", False):
            return "Parameter containing:\n" + text
        return text

    @classmethod
    def __torch_dispatch__(
        cls,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Optional[dict[str, Any]] = None,
    ) -> Any:
        if func in _METADATA_OPS:
            return func(args[0]._elem, *args[1:])
        # Internal aten calls must not look like user operations to a TorchFunctionMode the
        # user (or tensor-dap's engine) has active.
        with torch._C.DisableTorchFunction():
            return _run(func, args, kwargs or {})


# --------------------------------------------------------------------------------------------
# The kernel shared by __torch_dispatch__ and the ``accel`` backend kernels


def _same_device_error(first: str, second: str) -> RuntimeError:
    return RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"{first} and {second}!"
    )


def _check_devices(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise PyTorch's error when accelerator tensors meet non-scalar CPU tensors.

    Like TensorIterator, 0-dim CPU tensors ride along with device tensors, and the two devices
    are named in the order they were met (the first non-scalar operand's device first).
    """
    if func in _COPY_OPS:
        return
    first: Optional[str] = None
    skip_index = func in _INDEX_OPS
    values: list[Any] = list(args)
    values.extend(kwargs.values())
    for position, value in enumerate(values):
        if skip_index and position == 1:
            continue
        items = value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            if not isinstance(item, torch.Tensor):
                continue
            if isinstance(item, AcceleratorTensor):
                name = "accel:0"
            elif item.device.type == "cpu":
                if item.dim() == 0:
                    continue
                name = "cpu"
            else:
                continue
            if first is None:
                first = name
            elif name != first:
                raise _same_device_error(first, name)


def _unwrap(value: Any) -> Any:
    if isinstance(value, AcceleratorTensor):
        return value._elem
    if isinstance(value, torch.device):
        return _CPU if value.type == BACKEND_NAME else value
    if isinstance(value, (list, tuple)) and any(
        isinstance(v, (AcceleratorTensor, torch.device)) for v in value
    ):
        return type(value)(_unwrap(v) for v in value)
    return value


def _wrap(value: Any, inputs: dict[int, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        outer = inputs.get(id(value))
        if outer is not None:  # in-place and out= ops hand back their own argument
            return outer
        return AcceleratorTensor(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_wrap(v, inputs) for v in value)
    return value


def _collect(value: Any, inputs: dict[int, torch.Tensor]) -> None:
    """Map each argument's CPU data to the tensor the caller passed (itself for CPU tensors)."""
    if isinstance(value, AcceleratorTensor):
        inputs[id(value._elem)] = value
    elif isinstance(value, torch.Tensor):
        inputs[id(value)] = value
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect(v, inputs)


def _target_device(kwargs: dict[str, Any]) -> Optional[torch.device]:
    device = kwargs.get("device")
    if device is None:
        return None
    return torch.device(device)


def _run(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if func is _aten.copy_.default:
        return _copy_(args[0], args[1], *args[2:], **kwargs)
    if func is _aten._copy_from.default or func is _aten._copy_from_and_resize.default:
        src, dst = args[0], args[1]
        if func is _aten._copy_from_and_resize.default and dst.shape != src.shape:
            (dst._elem if isinstance(dst, AcceleratorTensor) else dst).resize_(src.shape)
        return _copy_(dst, src, *args[2:], **kwargs)

    _check_devices(func, args, kwargs)
    target = _target_device(kwargs)
    new_args = tuple(_unwrap(a) for a in args)
    new_kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
    out = _CPU_KERNELS.get(func, func)(*new_args, **new_kwargs)
    if target is not None and target.type != BACKEND_NAME:
        return out  # e.g. ``_to_copy(device="cpu")``: a plain tensor on the host
    inputs: dict[int, torch.Tensor] = {}
    for a in args:
        _collect(a, inputs)
    for v in kwargs.values():
        _collect(v, inputs)
    return _wrap(out, inputs)


def _copy_(dst: torch.Tensor, src: torch.Tensor, *rest: Any, **kwargs: Any) -> torch.Tensor:
    """``dst.copy_(src)`` across the host/device boundary, in either direction."""
    target = dst._elem if isinstance(dst, AcceleratorTensor) else dst
    source = src._elem if isinstance(src, AcceleratorTensor) else src
    target.copy_(source, *rest, **kwargs)
    return dst


# Ops that reach the ``accel`` backend key itself rather than ``__torch_dispatch__``: factory
# functions (``torch.empty(..., device="accel")``; ``torch.zeros`` and friends build on them) and
# the copy inside ``torch.tensor(data, device=...)``, which runs with Python dispatch excluded.
_BACKEND_OPS = (
    "empty.memory_format",
    "empty_strided",
    "_copy_from",
    "_copy_from_and_resize",
    "tril_indices",
    "triu_indices",
)


def _backend_kernel(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C.DisableTorchFunction():
            return _run(op, args, kwargs)

    return kernel


# --------------------------------------------------------------------------------------------
# Kernels PyTorch has only for GPUs. ``nn.LSTM``/``nn.GRU`` (and their cells) take the fused-cell
# path for every non-CPU device, PrivateUse1 included; these are the same maths on the CPU, with
# the same workspace layout as the CUDA kernels, so autograd's formulas apply unchanged.


def _lstm_cell(
    input_gates: torch.Tensor,
    hidden_gates: torch.Tensor,
    cx: torch.Tensor,
    input_bias: Optional[torch.Tensor] = None,
    hidden_bias: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias
    if hidden_bias is not None:
        gates = gates + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def _lstm_cell_backward(
    grad_hy: Optional[torch.Tensor],
    grad_cy: Optional[torch.Tensor],
    cx: torch.Tensor,
    cy: torch.Tensor,
    workspace: torch.Tensor,
    has_bias: bool,
) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    gh = grad_hy if grad_hy is not None else torch.zeros_like(cy)
    gc = grad_cy if grad_cy is not None else torch.zeros_like(cy)
    gc_total = gh * o * (1 - tanh_cy * tanh_cy) + gc
    grad_gates = torch.cat(
        [
            gc_total * g * i * (1 - i),
            gc_total * cx * f * (1 - f),
            gc_total * i * (1 - g * g),
            gh * tanh_cy * o * (1 - o),
        ],
        1,
    )
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, gc_total * f, grad_bias


def _gru_cell(
    input_gates: torch.Tensor,
    hidden_gates: torch.Tensor,
    hx: torch.Tensor,
    input_bias: Optional[torch.Tensor] = None,
    hidden_bias: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    ir, ii, in_ = input_gates.chunk(3, 1)
    hr, hi, hn = hidden_gates.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, hn], 1)


def _gru_cell_backward(
    grad_hy: torch.Tensor, workspace: torch.Tensor, has_bias: bool
) -> tuple[torch.Tensor, ...]:
    r, z, n, hx, hn = workspace.chunk(5, 1)
    grad_z = grad_hy * (hx - n) * (1 - z) * z
    grad_hx = grad_hy * z
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_r = grad_n * hn * (1 - r) * r
    grad_input_gates = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden_gates = torch.cat([grad_r, grad_z, grad_n * r], 1)
    if has_bias:
        return (
            grad_input_gates,
            grad_hidden_gates,
            grad_hx,
            grad_input_gates.sum(0),
            grad_hidden_gates.sum(0),
        )
    return grad_input_gates, grad_hidden_gates, grad_hx, None, None  # type: ignore[return-value]


_CPU_KERNELS: dict[Any, Callable[..., Any]] = {
    _aten._thnn_fused_lstm_cell.default: _lstm_cell,
    _aten._thnn_fused_lstm_cell_backward_impl.default: _lstm_cell_backward,
    _aten._thnn_fused_gru_cell.default: _gru_cell,
    _aten._thnn_fused_gru_cell_backward.default: _gru_cell_backward,
}


# --------------------------------------------------------------------------------------------
# Process-wide setup


class _StandinBackendModule:
    """``torch.accel``: what PyTorch expects of a device module, plus our marker."""

    _tensor_dap_standin = True

    def __init__(self, library: torch.library.Library) -> None:
        self.library = library  # keeps the registrations alive
        self.tensor_class = AcceleratorTensor

    def is_initialized(self) -> bool:
        return True

    def is_available(self) -> bool:
        return True

    def current_device(self) -> int:
        return 0

    def device_count(self) -> int:
        return 1

    def _is_in_bad_fork(self) -> bool:
        return False

    def manual_seed_all(self, seed: int) -> None:
        # Data lives on the CPU, whose generator ``torch.manual_seed`` has already seeded.
        pass


_lock = threading.Lock()
_installed_device: Optional[torch.device] = None


def _device() -> torch.device:
    # ``torch.device("accel", 0)`` can be built only once PrivateUse1 carries that name.
    global _installed_device
    if _installed_device is None:
        _installed_device = torch.device(BACKEND_NAME, 0)
    return _installed_device


_installed = False


def _install() -> None:
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        current = torch._C._get_privateuse1_backend_name()
        if current == BACKEND_NAME:
            module = getattr(torch, BACKEND_NAME, None)
            if getattr(module, _MARKER, False):
                # Set up earlier in this process by another copy of this module (a reload):
                # its kernels make its tensor class, so that is the class to recognise here.
                globals()["AcceleratorTensor"] = module.tensor_class  # type: ignore[union-attr]
                _installed = True
                return
            raise RuntimeError(
                f"torch's PrivateUse1 backend is already named {BACKEND_NAME!r} by something "
                "other than tensor_dap.testing.standin; the stand-in accelerator cannot be set up "
                "in this process"
            )
        if current != "privateuseone":
            raise RuntimeError(
                f"torch's PrivateUse1 backend was already renamed to {current!r} in this process "
                f"(it can be renamed only once); the stand-in accelerator {BACKEND_NAME!r} needs "
                "it. Run the stand-in tests in a process that does not load that backend."
            )
        library = torch.library.Library("aten", "IMPL")
        for name in _BACKEND_OPS:
            packet_name, _, overload = name.partition(".")
            op = getattr(getattr(_aten, packet_name), overload or "default")
            library.impl(name, _backend_kernel(op), "PrivateUse1")
        _setup_privateuseone_for_python_backend(
            rename=BACKEND_NAME, backend_module=_StandinBackendModule(library)
        )
        # Backward of stand-in tensors runs in the thread that calls it, as on the CPU. On
        # autograd's device thread for `accel` it runs this module's Python kernels, and a
        # program whose interpreter shuts down while that thread holds or waits for the GIL
        # aborts at exit ("terminate called without an active exception"), one run in a few.
        torch._C._set_multithreading_enabled(False)
        _installed = True


def accelerator_device() -> torch.device:
    """The stand-in accelerator, ``torch.device("accel", 0)``; sets it up on first use."""
    _install()
    return _device()


def pick_device() -> torch.device:
    """Real CUDA when it is available, the stand-in accelerator otherwise."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    return accelerator_device()
