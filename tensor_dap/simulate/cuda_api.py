"""``torch.cuda`` answered by the simulation, and a clear stop for what cannot be simulated.

The program asks ``torch.cuda`` whether a device is there, what it is called, how much memory
it holds; it seeds, synchronises and empties caches. Those are answered here from the
simulation (one device, ``cuda:0``; memory from the live simulated tensors); ``torch.compile``
runs the model uncompiled. What has no CPU meaning (streams, events, CUDA graphs, RNG state of
the device) stops the run with one line naming the call and the user's line, never an obscure
crash later.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch

from tensor_dap.simulate import checkpoints, distributed
from tensor_dap.simulate import tensor as simulated
from tensor_dap.simulate.checkpoints import map_tensors
from tensor_dap.simulate.mode import check_index, is_cuda_device, to_standin
from tensor_dap.simulate.stop import caller_line, refuse
from tensor_dap.testing.standin import accelerator_device

__all__ = ["install"]

DEVICE_NAME = "tensor-dap simulated CUDA device (CPU)"

_peak = [0]


def _memory_allocated(device: Any = None) -> int:
    now = simulated.live_bytes()
    _peak[0] = max(_peak[0], now)
    return now


def _max_memory_allocated(device: Any = None) -> int:
    return max(_peak[0], _memory_allocated())


def _reset_peak(device: Any = None) -> None:
    _peak[0] = simulated.live_bytes()


def _set_device(device: Any) -> None:
    """Each process has one simulated device (a torchrun rank: its own ``cuda:LOCAL_RANK``)."""
    check_index(device if isinstance(device, int) else torch.device(device).index)


def _nothing(*args: Any, **kwargs: Any) -> None:
    """Seeding, synchronising, emptying caches: nothing to do on the CPU."""


def _exchange_device(device: int) -> int:
    """``with torch.cuda.device(0):``, ``torch.cuda.device_of(x)``: the one simulated device
    stays selected; the index it had is given back, as CUDA's exchange does."""
    if device < 0:
        return -1
    check_index(device)
    return int(simulated.DEVICE.index or 0)


class DeviceProperties:
    """What ``torch.cuda.get_device_properties`` answers: the simulated device, with an
    A100's numbers (the capability (8, 0) the simulation reports); ``nn.DataParallel`` and
    memory-budget code read them."""

    name = DEVICE_NAME
    major, minor = 8, 0
    total_memory = 80 * 2**30
    multi_processor_count = 108
    is_integrated = is_multi_gpu_board = 0
    L2_cache_size = 40 * 2**20
    warp_size = 32
    max_threads_per_multi_processor = 2048
    gcnArchName = "NVIDIA"

    def __repr__(self) -> str:
        return (
            f"_CudaDeviceProperties(name='{self.name}', major={self.major}, "
            f"minor={self.minor}, total_memory={self.total_memory // 2**20}MB, "
            f"multi_processor_count={self.multi_processor_count})"
        )


def _device_properties(device: Any = None) -> DeviceProperties:
    if device is not None:
        _set_device(device)  # (the index must be the simulated device's)
    return DeviceProperties()


def _rng_state(device: Any = "cuda") -> torch.Tensor:
    """``torch.cuda.get_rng_state()``: a state of CUDA's size (16 bytes) that restores nothing:
    the simulated device's random numbers come from the CPU generator, whose state
    ``torch.random.fork_rng()`` and checkpoints save and restore beside it."""
    return torch.zeros(16, dtype=torch.uint8)


def _set_rng_state(new_state: Any, device: Any = "cuda") -> None:
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        raise TypeError("RNG state must be a torch.ByteTensor")


def _set_rng_state_all(new_states: Any) -> None:
    for state in new_states:
        _set_rng_state(state)


def _mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes: the simulated device's size less its live tensors."""
    total = DeviceProperties.total_memory
    return max(total - _memory_allocated(), 0), total


def _memory_stats(device: Any = None) -> dict[str, int]:
    """The keys programs read of ``memory_stats()`` (allocated and reserved, now and peak)."""
    now, peak = _memory_allocated(), _max_memory_allocated()
    return {
        "allocated_bytes.all.current": now,
        "allocated_bytes.all.peak": peak,
        "reserved_bytes.all.current": now,
        "reserved_bytes.all.peak": peak,
        "active_bytes.all.current": now,
        "active_bytes.all.peak": peak,
        "num_alloc_retries": 0,
        "num_ooms": 0,
    }


def _memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    now, peak = _memory_allocated(), _max_memory_allocated()
    return (
        f"{DEVICE_NAME}: {now / 2**20:.1f} MiB of tensors allocated now, "
        f"{peak / 2**20:.1f} MiB at most\n"
    )


_ANSWERS: dict[str, Callable[..., Any]] = {
    "is_available": lambda: True,
    "device_count": lambda: simulated.COUNT,
    "current_device": lambda: simulated.DEVICE.index,
    "is_initialized": lambda: True,
    "init": _nothing,
    "_lazy_init": _nothing,
    "set_device": _set_device,
    "get_device_name": lambda device=None: DEVICE_NAME,
    "get_device_capability": lambda device=None: (8, 0),
    "get_device_properties": _device_properties,
    "_exchange_device": _exchange_device,
    "_maybe_exchange_device": _exchange_device,
    "initial_seed": lambda: torch.initial_seed(),
    "is_bf16_supported": lambda including_emulation=True: True,
    # no CUDA graph is ever captured (torch.cuda.graph stops the run); Adam and AdamW of torch
    # before 2.12 ask at every step(), SyncBatchNorm at every forward
    "is_current_stream_capturing": lambda: False,
    "synchronize": _nothing,
    "empty_cache": _nothing,
    "ipc_collect": _nothing,
    "manual_seed": _nothing,  # the data is made by the CPU generator, seeded by torch's own
    "manual_seed_all": _nothing,
    "seed": _nothing,
    "seed_all": _nothing,
    "memory_allocated": _memory_allocated,
    "max_memory_allocated": _max_memory_allocated,
    "memory_reserved": _memory_allocated,
    "max_memory_reserved": _max_memory_allocated,
    "reset_peak_memory_stats": _reset_peak,
    "reset_max_memory_allocated": _reset_peak,
    "get_rng_state": _rng_state,
    "get_rng_state_all": lambda: [_rng_state() for _ in range(simulated.COUNT)],
    "set_rng_state": _set_rng_state,
    "set_rng_state_all": _set_rng_state_all,
    "mem_get_info": _mem_get_info,
    "memory_stats": _memory_stats,
    "memory_summary": _memory_summary,
    "set_per_process_memory_fraction": _nothing,
}

#: torch.cuda names with no CPU meaning: calling them stops the run
_UNSUPPORTED = (
    "Stream",
    "Event",
    "ExternalStream",
    "CUDAGraph",
    "graph",
    "make_graphed_callables",
    "stream",
    "current_stream",
    "default_stream",
    "set_stream",
)


def _pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
    """``Tensor.pin_memory``: pinned host memory is plain host memory here (also in the
    DataLoader's pin-memory thread, which the simulation's mode does not reach)."""
    return self


def _uncompiled(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.compile`` runs what it is given uncompiled, as its ``disable=True`` does: its CUDA
    kernels need a GPU, and the bugs looked for here are the same in eager code. A module is
    still wrapped as compile wraps it (``OptimizedModule``: its ``state_dict()`` keys start
    with ``_orig_mod.`` as on the GPU); ``@torch.compile`` and ``torch.compile(mode=...)`` as
    a decorator work too. Said once on stderr, at the first call. The rules look inside (a
    compiled module's own ``__call__`` runs with the watch's mode off: compile_guard). Dynamo
    is imported at the first call (a second of every simulated process's start otherwise)."""
    said: list[bool] = []

    def wrapped(model: torch.nn.Module) -> Any:
        from torch._dynamo.eval_frame import DisableContext, OptimizedModule

        class EagerModule(OptimizedModule):
            __call__ = torch.nn.Module.__call__

        EagerModule.__name__ = EagerModule.__qualname__ = OptimizedModule.__name__
        return EagerModule(model, DisableContext())

    def compile(model: Any = None, **options: Any) -> Any:
        if model is None:  # torch.compile(mode=...) used as a decorator
            return lambda function: compile(function, **options)
        if options.get("disable"):
            return original(model, **options)
        if not said:
            said.append(True)
            print(
                f"tensor-dap --simulate cuda: torch.compile{caller_line()} runs uncompiled "
                "(compiled CUDA kernels need a GPU)",
                file=sys.stderr,
            )
        if isinstance(model, torch.nn.Module):
            return wrapped(model)
        return model

    compile.__doc__ = original.__doc__
    return compile


def _export(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.export.export`` of a model or inputs on the simulated device stops the run with
    one line: export traces with fake tensors of the real device's kernels (on the stand-in it
    aborted the process). On host tensors it runs as without the simulation."""

    def export(mod: Any, args: Any = (), kwargs: Any = None, *rest: Any, **options: Any) -> Any:
        tensors = [*_tensors_in(args), *_tensors_in(kwargs or {})]
        if isinstance(mod, torch.nn.Module):
            tensors += [*mod.parameters(), *mod.buffers()]
        if any(isinstance(t, simulated.SimulatedCudaTensor) for t in tensors):
            refuse("torch.export.export", "it traces the model for CUDA kernels")()
        return original(mod, args, kwargs, *rest, **options)

    export.__doc__ = original.__doc__
    return export


def _tensors_in(value: Any) -> list[Any]:
    """The tensors in nested dicts, lists and tuples."""
    found: list[Any] = []

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        found.append(tensor)
        return tensor

    map_tensors(value, keep)
    return found


def _set_default_device(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.set_default_device("cuda")``: the simulated device is the default."""

    def set_default_device(device: Any) -> None:
        original(to_standin(device))

    set_default_device.__doc__ = original.__doc__
    return set_default_device


def _get_default_device(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.get_default_device()`` after ``set_default_device("cuda")``: ``cuda:0``, as the
    tensors made by default say, not the stand-in that simulates it."""

    def get_default_device() -> torch.device:
        device: torch.device = original()
        return simulated.DEVICE if device == accelerator_device() else device

    get_default_device.__doc__ = original.__doc__
    return get_default_device


def _save_on_cpu(original: type) -> type:
    """``torch.autograd.graph.save_on_cpu(pin_memory=True)``: pinned host memory is plain host
    memory here (the stand-in backend has no pinned allocator), as ``Tensor.pin_memory``."""

    class save_on_cpu(original):  # type: ignore[misc]
        __doc__ = original.__doc__

        def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
            super().__init__(pin_memory=False, device_type=device_type)

    return save_on_cpu


class _Generator(torch.Generator):
    """``torch.Generator(device="cuda")``: the simulated device's data is made by the CPU."""

    def __new__(cls, device: Any = "cpu") -> _Generator:
        return super().__new__(cls, "cpu" if is_cuda_device(device) else device)  # type: ignore[call-arg]


def _from_dlpack(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.from_dlpack`` of a simulated CUDA tensor: its data, on the simulated device, as a
    DLPack round trip gives on CUDA (the real one asks for the current CUDA stream). Made by no
    op the watch sees, as on a GPU; other sources go to PyTorch."""

    def from_dlpack(ext_tensor: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(ext_tensor, simulated.SimulatedCudaTensor):
            with torch._C.DisableTorchFunction():
                return ext_tensor.detach()
        return original(ext_tensor, *args, **kwargs)

    from_dlpack.__doc__ = original.__doc__
    return from_dlpack


def _own(name: str, answer: Callable[..., Any]) -> Callable[..., Any]:
    """A function of its own for each name (torch.compile's tables refuse one object under
    two names)."""

    def own(*args: Any, **kwargs: Any) -> Any:
        return answer(*args, **kwargs)

    own.__name__ = own.__qualname__ = name
    return own


def _without_cudnn(original: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """``torch.backends.cudnn.is_acceptable``: on a simulated tensor (``device.type`` is
    ``"cuda"``) of a build without cuDNN, False without the warning that PyTorch was compiled
    without it (an RNN asks at every call: a GPU run warns nothing; its cuDNN kernels and the
    native ones compute the same)."""

    def is_acceptable(tensor: Any) -> bool:
        if not torch.backends.cudnn.is_available():  # type: ignore[no-untyped-call]
            return False
        return original(tensor)

    return is_acceptable


def install() -> None:
    """Answer ``torch.cuda`` from the simulation for the rest of the process."""
    cuda = torch.cuda
    for module in (cuda, cuda.random):  # (torch.cuda.random.manual_seed: the same functions)
        for name, answer in _ANSWERS.items():
            if module is cuda or hasattr(module, name):
                setattr(module, name, _own(name, answer))
        for name in _UNSUPPORTED:
            if module is cuda or hasattr(module, name):
                stop = refuse(f"torch.cuda.{name}", "CUDA streams, events and graphs")
                setattr(module, name, stop)
    torch.compile = _uncompiled(torch.compile)
    from torch import export as torch_export

    torch_export.export = _export(torch_export.export)
    torch.set_default_device = _set_default_device(torch.set_default_device)
    torch.get_default_device = _get_default_device(torch.get_default_device)
    graph = torch.autograd.graph
    graph.save_on_cpu = _save_on_cpu(graph.save_on_cpu)  # type: ignore[assignment,misc]
    torch.Generator = _Generator  # type: ignore[misc]
    torch.Tensor.pin_memory = _pin_memory  # type: ignore[method-assign,assignment]
    distributed.install()
    checkpoints.install()
    from_dlpack = _from_dlpack(torch.utils.dlpack.from_dlpack)
    torch.from_dlpack = torch.utils.dlpack.from_dlpack = from_dlpack  # type: ignore[attr-defined]
    cudnn = torch.backends.cudnn
    cudnn.is_acceptable = _without_cudnn(cudnn.is_acceptable)
