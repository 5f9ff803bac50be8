"""``DistributedDataParallel`` of a module on the simulated device.

Why: most multi-GPU training scripts are torchrun + DDP. DDP's C++ reducer calls the process
group on the module's tensors; under the simulation those are wrapper tensors whose data gloo
cannot take, so the real DDP cannot wrap a simulated module. This module's
:class:`DistributedDataParallel` is a subclass of PyTorch's, installed in its place
(``torch.nn.parallel.DistributedDataParallel`` and ``torch.nn.parallel.distributed``'s) while
the simulation runs, so ``isinstance(model, DistributedDataParallel)`` holds for either name.
For a module on the simulated device its ``__init__`` builds no reducer and does, in Python,
on the tensors' CPU data, what DDP does that matters to the program's results:

- parameters and buffers broadcast from the group's rank 0 at construction (``init_sync``);
- buffers broadcast from rank 0 before each forward (``broadcast_buffers``);
- inputs moved to ``device_ids[0]``, as DDP moves them (a CPU batch is fine under DDP);
- gradients averaged across the ranks by the time ``backward()`` returns (a callback queued
  on the autograd engine by the first gradient hook of a backward whose forward ran with
  gradient sync on); ``no_sync()`` skips it; a parameter unused on every rank keeps no
  gradient, one unused on some ranks gets the average (zeros from those ranks).

The other keyword arguments are those of PyTorch's DDP (checked against its signature) and are
accepted. What is not simulated (``register_comm_hook``, ``join``...) stops with one line. DDP
of a module kept on the CPU is PyTorch's own, unchanged.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _get_device_index, _unflatten_dense_tensors
from torch.distributed.utils import _to_kwargs
from torch.nn.parallel import distributed as ddp_module

from tensor_dap.simulate.stop import refuse
from tensor_dap.testing.standin import AcceleratorTensor

__all__ = ["DistributedDataParallel", "install"]

_DDP = ddp_module.DistributedDataParallel
_SIGNATURE = inspect.signature(_DDP.__init__)
#: bytes per broadcast bucket, as DDP's ``broadcast_bucket_size``
_BUCKET = 250 * 1024 * 1024


def _on_simulated_device(module: torch.nn.Module) -> bool:
    tensors = itertools.chain(module.parameters(), module.buffers())
    return any(isinstance(t, AcceleratorTensor) for t in tensors)


def _host(tensor: torch.Tensor) -> torch.Tensor:
    return tensor._elem if isinstance(tensor, AcceleratorTensor) else tensor


def _ignored(module: torch.nn.Module) -> set[str]:
    """Names DDP is told to leave alone (``_set_params_and_buffers_to_ignore_for_model``)."""
    return set(getattr(module, "_ddp_params_and_buffers_to_ignore", ()))


def _not_simulated(name: str) -> Callable[..., Any]:
    """DDP's ``name``: refused on a simulated module, PyTorch's own otherwise."""
    original = getattr(_DDP, name)
    stop = refuse(f"DistributedDataParallel.{name}", "the simulated DDP has no C++ reducer")

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._simulated_by_tensor_dap:
            stop()
        return original(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = original.__doc__
    return method


class DistributedDataParallel(_DDP):
    """PyTorch's DDP; for a module on the simulated device, its semantics in Python."""

    # messages, ``repr`` and pickles name it as PyTorch's class
    __module__ = _DDP.__module__
    _simulated_by_tensor_dap = False

    def __init__(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
        if not _on_simulated_device(module):
            super().__init__(module, *args, **kwargs)
            return
        bound = _SIGNATURE.bind(self, module, *args, **kwargs)
        bound.apply_defaults()
        options = bound.arguments
        torch.nn.Module.__init__(self)
        self._simulated_by_tensor_dap = True
        self.module = module
        group = options["process_group"]
        self.process_group = group or dist.distributed_c10d._get_default_group()
        self.device_type = "cuda"
        ids = options["device_ids"]
        self.device_ids = [_get_device_index(i, True) for i in ids] if ids else None
        output = options["output_device"]
        if output is None and self.device_ids:
            output = self.device_ids[0]
        self.output_device = _get_device_index(output, True) if output is not None else None
        self.dim = options["dim"]
        # (the signature is this torch's: 2.11 has no forward_sync_buffers, older ones fewer)
        buffers = options.get("forward_sync_buffers")
        if buffers is None:
            buffers = options["broadcast_buffers"] is not False
        self.forward_sync_buffers = buffers
        for name in ("find_unused_parameters", "gradient_as_bucket_view", "static_graph"):
            setattr(self, name, options.get(name, False))
        self.mixed_precision = options.get("mixed_precision")
        self.require_backward_grad_sync = True
        self.require_forward_param_sync = True
        self._sync_pending = False
        ignored = _ignored(module)
        self._synced_parameters = [
            p for n, p in module.named_parameters() if n not in ignored and p.requires_grad
        ]
        if not self._synced_parameters:
            raise RuntimeError(
                "DistributedDataParallel is not needed when a module "
                "doesn't have any parameter that requires a gradient."
            )
        if options.get("init_sync", True):
            params = [p for n, p in module.named_parameters() if n not in ignored]
            self._broadcast(params + (self._buffers_to_sync() if buffers else []))
        for param in self._synced_parameters:
            param.register_post_accumulate_grad_hook(self._after_accumulation)  # type: ignore[no-untyped-call]

    # -- what DDP does around forward and backward ----------------------------------------

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if not self._simulated_by_tensor_dap:
            return super().forward(*inputs, **kwargs)  # type: ignore[no-untyped-call]
        if self.require_forward_param_sync and self.forward_sync_buffers:
            self._broadcast(self._buffers_to_sync())
        if self.device_ids and (inputs or kwargs):
            device = torch.device(self.device_type, self.device_ids[0])
            moved, moved_kwargs = _to_kwargs(inputs, kwargs, device, False)
            inputs, kwargs = moved[0], moved_kwargs[0]
        sync = torch.is_grad_enabled() and self.require_backward_grad_sync
        self._sync_pending = sync  # (as DDP's reducer, each forward decides for its backward)
        output = self.module(*inputs, **kwargs)
        self.require_forward_param_sync = sync
        return output

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Gradient accumulation: backward passes of forwards run inside do not all-reduce."""
        was = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = was

    def _set_static_graph(self) -> None:
        if not self._simulated_by_tensor_dap:
            super()._set_static_graph()  # type: ignore[no-untyped-call]
            return
        self.static_graph = True

    register_comm_hook = _not_simulated("register_comm_hook")
    join = _not_simulated("join")
    join_hook = _not_simulated("join_hook")
    _register_builtin_comm_hook = _not_simulated("_register_builtin_comm_hook")
    _register_fused_optim = _not_simulated("_register_fused_optim")

    # -- the collectives, on the CPU data -------------------------------------------------

    def _buffers_to_sync(self) -> list[torch.Tensor]:
        ignored = _ignored(self.module)
        return [b for n, b in self.module.named_buffers() if n not in ignored]

    def _broadcast(self, tensors: list[torch.Tensor]) -> None:
        """``tensors`` made equal to the group's rank 0's (DDP's ``_sync_module_states``)."""
        if tensors:
            with torch._C.DisableTorchFunction():
                dist._broadcast_coalesced(  # type: ignore[attr-defined]
                    self.process_group, [_host(t) for t in tensors], _BUCKET, 0
                )

    def _after_accumulation(self, param: torch.Tensor) -> None:
        """The first gradient of a backward to sync queues the all-reduce for its end."""
        if self._sync_pending:
            self._sync_pending = False
            engine = torch.autograd.Variable._execution_engine
            engine.queue_callback(self._average_gradients)

    def _average_gradients(self) -> None:
        """Each gradient replaced by its mean over the ranks (DDP's reducer at backward end)."""
        params = self._synced_parameters
        group = self.process_group
        with torch._C.DisableTorchFunction(), torch.no_grad():
            used = torch.tensor([p.grad is not None for p in params], dtype=torch.int32)
            dist.all_reduce(used, group=group)
            synced = [p for p, count in zip(params, used.tolist()) if count]
            for param in synced:
                if param.grad is None:
                    param.grad = torch.zeros_like(param)
            world = dist.get_world_size(group)
            grads = [_host(p.grad) for p in synced if p.grad is not None]
            for dtype in {g.dtype for g in grads}:
                same = [g for g in grads if g.dtype == dtype]
                flat = _flatten_dense_tensors(same).div_(world)  # type: ignore[no-untyped-call]
                dist.all_reduce(flat, group=group)
                means = _unflatten_dense_tensors(flat, same)  # type: ignore[no-untyped-call]
                for grad, mean in zip(same, means):
                    grad.copy_(mean)


def install() -> None:
    """Put :class:`DistributedDataParallel` in place of PyTorch's for the rest of the process."""
    ddp_module.DistributedDataParallel = DistributedDataParallel  # type: ignore[misc]
    torch.nn.parallel.DistributedDataParallel = DistributedDataParallel  # type: ignore[misc]
