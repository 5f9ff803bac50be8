"""A stand-in accelerator that runs on the CPU: tensors that *say* they live on ``accel:0``.

Why it exists: CI and most developer machines have no GPU, yet tensor-dap's rules are about
tensors that leave an accelerator, meet tensors on another device, and so on.  This module gives
such code a device whose tensors report ``device(type='accel', index=0)`` (``is_cpu`` is False),
refuse ``.numpy()`` like CUDA tensors do, and raise PyTorch's own "Expected all tensors to be on
the same device" error when they meet non-scalar CPU tensors, while their data and all the
arithmetic stay on the CPU.  Autograd, ``torch.nn`` and ``torch.optim`` work through it unchanged.

How: the ``PrivateUse1`` dispatch key is renamed to ``accel`` and set up as a Python backend with
``torch.utils.backend_registration._setup_privateuseone_for_python_backend`` (this module: the
process-wide setup and the public functions); a wrapper tensor subclass
(:mod:`~tensor_dap.testing.standin.tensor`) holds a plain CPU tensor, and its
``__torch_dispatch__`` unwraps, runs the aten op on the CPU and wraps tensor results again.  Ops
that reach the ``accel`` backend key itself (``torch.empty(..., device="accel")``, on which
``torch.zeros``/``ones``/``randn``/... build, and the copy inside ``torch.tensor(data,
device=...)``) are served by kernels registered with ``torch.library`` that do the same.  Ops
PyTorch has only for GPUs (the fused LSTM/GRU cells) get CPU kernels
(:mod:`~tensor_dap.testing.standin.rnn_kernels`); printing is in
:mod:`~tensor_dap.testing.standin.printing`; ``model.to(device)`` keeps the module's Parameter
objects, as a GPU's does (:mod:`~tensor_dap.testing.standin.module_moves`).

This relies on **private, experimental torch API** (the backend-registration helper, wrapper
subclasses, ``torch._tensor_str`` internals for printing); the agent never imports it: tests do,
and ``tensor-dap --simulate cuda`` (:mod:`tensor_dap.simulate`, whose tensors say ``cuda:0``
through :func:`~tensor_dap.testing.standin.tensor.present_as`).  Nothing happens at import:
the process-wide setup (``PrivateUse1`` can be renamed once per process) runs on the first call
of :func:`accelerator_device`.

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
from typing import Any, Callable

import torch
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

from tensor_dap.testing.standin import module_moves
from tensor_dap.testing.standin import tensor as _tensor
from tensor_dap.testing.standin.tensor import (
    BACKEND_NAME,
    AcceleratorTensor,
    run_op,
    standin_device,
)

__all__ = ["BACKEND_NAME", "AcceleratorTensor", "accelerator_device", "pick_device"]

_MARKER = "_tensor_dap_standin"

_aten = torch.ops.aten

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
    "_local_scalar_dense",
)


def _backend_kernel(op: Any) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C.DisableTorchFunction():
            return run_op(op, args, kwargs)

    return kernel


# torch.library has no annotations; the two calls made here, typed:
# Library(namespace, kind) and library.impl(op name, kernel, dispatch key)
_new_library: Callable[[str, str], torch.library.Library] = torch.library.Library


def _register(library: torch.library.Library, name: str, kernel: Callable[..., Any]) -> None:
    impl: Callable[[str, Callable[..., Any], str], object] = library.impl
    impl(name, kernel, "PrivateUse1")


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

    def get_amp_supported_dtype(self) -> list[torch.dtype]:
        """What ``torch.autocast("accel")`` may lower to (torch asks before entering it, as
        ``torch.utils.checkpoint`` does for the default accelerator at each recomputation)."""
        return [torch.float16, torch.bfloat16]


_lock = threading.Lock()
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
            if module is not None and getattr(module, _MARKER, False):
                # Set up earlier in this process by another copy of this package (a reload):
                # its kernels make its tensor class, so that is the class to recognise here.
                for namespace in (globals(), vars(_tensor)):
                    namespace["AcceleratorTensor"] = module.tensor_class
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
        library = _new_library("aten", "IMPL")
        for name in _BACKEND_OPS:
            packet_name, _, overload = name.partition(".")
            op = getattr(getattr(_aten, packet_name), overload or "default")
            _register(library, name, _backend_kernel(op))
        _setup_privateuseone_for_python_backend(
            rename=BACKEND_NAME, backend_module=_StandinBackendModule(library)
        )
        # Backward of stand-in tensors runs in the thread that calls it, as on the CPU. On
        # autograd's device thread for `accel` it runs this module's Python kernels, and a
        # program whose interpreter shuts down while that thread holds or waits for the GIL
        # aborts at exit ("terminate called without an active exception"), one run in a few.
        torch._C._set_multithreading_enabled(False)
        module_moves.install()
        _installed = True


def accelerator_device() -> torch.device:
    """The stand-in accelerator, ``torch.device("accel", 0)``; sets it up on first use."""
    _install()
    return standin_device()


def pick_device() -> torch.device:
    """Real CUDA when it is available, the stand-in accelerator otherwise."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    return accelerator_device()
