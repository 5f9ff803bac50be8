"""The stand-in's tensor type, :class:`AcceleratorTensor`, and how ops on it run.

A wrapper subclass (``torch.Tensor._make_wrapper_subclass``) reports the device ``accel:0`` and
holds a plain CPU tensor; :func:`run_op` (its ``__torch_dispatch__``, and the ``accel`` backend
kernels registered by :mod:`tensor_dap.testing.standin`) unwraps the arguments, checks their
devices as PyTorch does, runs the aten op on the CPU and wraps tensor results again.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Protocol

import torch

from tensor_dap.testing.standin.printing import tensor_repr
from tensor_dap.testing.standin.rnn_kernels import CPU_KERNELS

__all__ = ["BACKEND_NAME", "AcceleratorTensor", "present_as", "run_op", "standin_device"]

BACKEND_NAME = "accel"
"""The device type of the stand-in; tensors report ``accel:0``."""

_CPU = torch.device("cpu")

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

# Ops that take some tensors on the host whatever the device of the others, as CUDA's do (the
# lengths and batch sizes of packed sequences, CTC's targets and lengths), by position; and
# results they make there.
_HOST_ARGUMENTS = {
    _aten.ctc_loss.Tensor: (1, 2, 3),
    _aten.ctc_loss.IntList: (1,),
    _aten._ctc_loss.Tensor: (2, 3),
    _aten._ctc_loss_backward.Tensor: (3, 4),
    _aten._pack_padded_sequence.default: (1,),
    _aten._pad_packed_sequence.default: (1,),
    _aten._pack_padded_sequence_backward.default: (2,),
    _aten.lstm.data: (1,),
    _aten.gru.data: (1,),
    _aten.rnn_tanh.data: (1,),
    _aten.rnn_relu.data: (1,),
    # a jagged nested tensor's min and max sequence lengths: host tensors on every device
    _aten._nested_view_from_jagged.default: (5, 6),
}
_HOST_RESULTS = {
    _aten._pack_padded_sequence.default: (1,),
    _aten._pad_packed_sequence.default: (1,),
}

_installed_device: Optional[torch.device] = None

#: device types whose ``torch.device`` arguments mean the stand-in (see :func:`present_as`)
_STANDIN_TYPES = {BACKEND_NAME}


def standin_device() -> torch.device:
    """``torch.device("accel", 0)``, which can be built only once PrivateUse1 carries that name."""
    global _installed_device
    if _installed_device is None:
        _installed_device = torch.device(BACKEND_NAME, 0)
    return _installed_device


class _TensorDescriptor(Protocol):
    def __get__(self, obj: torch.Tensor, owner: Optional[type] = None) -> torch.Tensor: ...

    def __set__(self, obj: torch.Tensor, value: torch.Tensor) -> None: ...


# ``TensorBase.data`` is a C getset descriptor; torch's stubs declare it as a plain attribute.
_TENSOR_DATA: _TensorDescriptor = vars(torch._C.TensorBase)["data"]


class AcceleratorTensor(torch.Tensor):
    """A tensor on the stand-in device ``accel:0``; its data is the CPU tensor ``_elem``.

    Users never build one directly: create tensors with ``device=accelerator_device()`` or move
    them with ``.to(accelerator_device())`` as with any device.
    """

    _elem: torch.Tensor

    # Torch-function handling stays off for the subclass: results must not be converted into
    # the subclass by the default ``__torch_function__`` (a ``.cpu()`` result is a plain tensor).
    # torch's stubs type it as a classmethod; torch documents this plain-function assignment.
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
            device=standin_device(),
            requires_grad=False,
            dispatch_sizes_strides_policy="sizes",
        )
        r._elem = elem
        return r

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Pickled as the CPU data it holds, rebuilt on the device: torch's own reduction
        would rebuild a wrapper without that data, on the device Python is told it is on (under
        the CUDA simulation a CUDA tensor, which this CPU build aborts on at its first use)."""
        if torch._C._has_torch_function_unary(self):
            return torch.overrides.handle_torch_function(
                AcceleratorTensor.__reduce_ex__, (self,), self, protocol
            )
        return (_rebuild, (type(self), self._elem, self.requires_grad, attributes(self)))

    # ``param.data = other`` (used by ``nn.Module._apply`` for ``model.double()`` and the like)
    # swaps the C++ tensor's metadata only; keep the CPU data in step with it.
    @property
    def data(self) -> torch.Tensor:
        return _TENSOR_DATA.__get__(self)

    @data.setter
    def data(self, new: torch.Tensor) -> None:
        _TENSOR_DATA.__set__(self, new)
        if isinstance(new, AcceleratorTensor):
            self._elem = new._elem

    # The C implementations of ``tolist`` and ``numpy`` refuse every Python-dispatch subclass, so
    # these two are done here, as a CUDA tensor would do them. A TorchFunctionMode active in the
    # user's code still sees one call (its ``func`` is this method, named like the original).

    def tolist(self) -> Any:
        """Copy to the host and return nested Python lists, as ``Tensor.tolist`` does."""
        if torch._C._has_torch_function_unary(self):
            return torch.overrides.handle_torch_function(AcceleratorTensor.tolist, (self,), self)
        return self._elem.tolist()

    def numpy(self, *, force: bool = False) -> Any:
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

    # mypy takes a dunder's parameters as positional-only, so it rejects any keyword-only
    # parameter here, even the very signature of ``Tensor.__repr__`` (hence the ignore and the
    # ``Callable[..., str]`` handle below).
    def __repr__(self, *, tensor_contents: Optional[str] = None) -> str:  # type: ignore[override]
        """``tensor([1., 2.], device='accel:0')``: what a CUDA tensor prints, with our device."""
        if torch._C._has_torch_function_unary(self):
            public_api: Callable[..., str] = AcceleratorTensor.__repr__
            return torch.overrides.handle_torch_function(
                public_api, (self,), self, tensor_contents=tensor_contents
            )
        return tensor_repr(self, self._elem, tensor_contents)

    # torch's stubs type ``Tensor.__torch_dispatch__`` as a plain function; torch documents
    # (and calls) it as a classmethod with these defaults.
    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Optional[dict[str, Any]] = None,
    ) -> Any:
        if func in _METADATA_OPS:
            return func(args[0]._elem, *args[1:])
        if any(not issubclass(kind, AcceleratorTensor) for kind in types):
            # another subclass among the arguments (a program's logging tensor wrapping ours):
            # its __torch_dispatch__ first, which unwraps it, as the protocol asks
            return NotImplemented
        # Internal aten calls must not look like user operations to a TorchFunctionMode the
        # user (or tensor-dap's engine) has active.
        with torch._C.DisableTorchFunction():
            return run_op(func, args, kwargs or {})


#: the class op results are wrapped in, and the device name PyTorch's errors give it
_presentation: dict[str, Any] = {"class": AcceleratorTensor, "name": f"{BACKEND_NAME}:0"}


def attributes(tensor: torch.Tensor) -> dict[str, Any]:
    """What a stand-in tensor's ``__dict__`` holds beside its data: the program's attributes
    and a parameter's ``_is_param``, without the size caches PyTorch keeps there (capsules,
    which pickle refuses: ``Tensor._clear_non_serializable_cached_data`` drops them too)."""
    return {
        key: value
        for key, value in vars(tensor).items()
        if key != "_elem" and not key.startswith("_sym_")
    }


def _rebuild(
    kind: type, data: torch.Tensor, requires_grad: bool, state: dict[str, Any]
) -> torch.Tensor:
    """An unpickled :class:`AcceleratorTensor` (of the subclass ``kind``) holding ``data``, with
    the attributes it had (a parameter's ``_is_param``)."""
    tensor: torch.Tensor = kind(data)
    vars(tensor).update(state)
    return tensor.requires_grad_(requires_grad) if requires_grad else tensor


def present_as(tensor_class: type, device_name: str, device_type: str) -> None:
    """Wrap op results in ``tensor_class`` (a subclass of :class:`AcceleratorTensor`) and name
    the device ``device_name`` in errors; ``torch.device(device_type)`` arguments mean the
    stand-in too. For ``tensor-dap --simulate cuda`` (:mod:`tensor_dap.simulate`), whose
    tensors say they are on ``cuda:0``."""
    _presentation["class"] = tensor_class
    _presentation["name"] = device_name
    _STANDIN_TYPES.add(device_type)


# --------------------------------------------------------------------------------------------
# The kernel shared by __torch_dispatch__ and the ``accel`` backend kernels


def _same_device_error(first: str, second: str) -> RuntimeError:
    return RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"{first} and {second}!"
    )


def _check_index_devices(indexed: Any, indices: Any) -> None:
    """``cpu_tensor[device_index]`` raises, as PyTorch's ``index`` does on any device ("Only
    allow: dev_tensor[{cpu,dev}_tensor]"): a CPU lookup table indexed by labels on the GPU."""
    if isinstance(indexed, AcceleratorTensor) or not isinstance(indexed, torch.Tensor):
        return
    if any(isinstance(index, AcceleratorTensor) for index in indices or ()):
        raise RuntimeError(
            "indices should be either on cpu or on the same device as the indexed tensor "
            f"({indexed.device})"
        )


def _check_devices(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise PyTorch's error when accelerator tensors meet non-scalar CPU tensors.

    Like TensorIterator, 0-dim CPU tensors ride along with device tensors, and the two devices
    are named in the order they were met (the first non-scalar operand's device first).
    """
    if func in _COPY_OPS:
        return
    if func is _aten.index.Tensor and len(args) > 1:
        _check_index_devices(args[0], args[1])
    host = _HOST_ARGUMENTS.get(func, ())
    if func is _aten._pack_padded_sequence.default and isinstance(args[1], AcceleratorTensor):
        raise RuntimeError(  # (PyTorch's own check, which a CUDA tensor fails as well)
            "'lengths' argument should be a 1D CPU int64 tensor, but got 1D "
            f"{_presentation['name']} Long tensor"
        )
    first: Optional[str] = None
    skip_index = func in _INDEX_OPS
    written = _written_positions(func)
    values: list[Any] = list(args)
    values.extend(kwargs.values())
    for position, value in enumerate(values):
        if (skip_index and position == 1) or position in host:
            continue
        items = value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            if not isinstance(item, torch.Tensor):
                continue
            if isinstance(item, AcceleratorTensor):
                name = _presentation["name"]
            elif item.device.type == "cpu":
                if item.dim() == 0 and position not in written:
                    continue
                name = "cpu"
            else:
                continue
            if first is None:
                first = name
            elif name != first:
                raise _same_device_error(first, name)


#: in-place ops whose device tensor argument is read as a number or for its shape only
#: (``cpu0.fill_(cuda0)`` takes ``cuda0.item()``): legal into a CPU scalar
_VALUE_READ_AS_NUMBER = frozenset(
    ("aten::fill_", "aten::masked_fill_", "aten::index_fill_", "aten::resize_as_")
)


@functools.cache
def _written_positions(func: Any) -> frozenset[int]:
    """The positions of the arguments an op writes into (``self`` of ``add_``): a 0-dim CPU
    tensor rides along with device tensors as an input only (TensorIterator's CPU scalars):
    ``running_loss += loss`` into ``torch.tensor(0.0)`` raises on a GPU."""
    try:
        arguments = func._schema.arguments
        name = func._schema.name
    except AttributeError:
        return frozenset()
    if name in _VALUE_READ_AS_NUMBER:
        return frozenset()
    return frozenset(
        i for i, a in enumerate(arguments) if a.alias_info is not None and a.alias_info.is_write
    )


def _unwrap(value: Any) -> Any:
    if isinstance(value, AcceleratorTensor):
        return value._elem
    if isinstance(value, torch.device):
        return _CPU if value.type in _STANDIN_TYPES else value
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
        return _presentation["class"](value)
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


def run_op(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run the aten op ``func`` on the CPU data of its arguments; wrap tensor results."""
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
    out = CPU_KERNELS.get(func, func)(*new_args, **new_kwargs)
    if target is not None and target.type not in _STANDIN_TYPES:
        return out  # e.g. ``_to_copy(device="cpu")``: a plain tensor on the host
    inputs: dict[int, torch.Tensor] = {}
    for a in args:
        _collect(a, inputs)
    for v in kwargs.values():
        _collect(v, inputs)
    host = _HOST_RESULTS.get(func)
    if host is not None:  # (``batch_sizes`` of a packed sequence stays on the host)
        return tuple(r if i in host else _wrap(r, inputs) for i, r in enumerate(out))
    return _wrap(out, inputs)


def _copy_(dst: torch.Tensor, src: torch.Tensor, *rest: Any, **kwargs: Any) -> torch.Tensor:
    """``dst.copy_(src)`` across the host/device boundary, in either direction."""
    target = dst._elem if isinstance(dst, AcceleratorTensor) else dst
    source = src._elem if isinstance(src, AcceleratorTensor) else src
    target.copy_(source, *rest, **kwargs)
    return dst
