"""``--simulate cuda``: run an unmodified CUDA program on the CPU as if one CUDA device were there.

Why: device bugs (a CPU loss accumulator, a CPU tensor made inside ``forward``, a checkpoint
loaded to the CPU and mixed in) only show on a GPU, an hour into a rented job. Under the
simulation every tensor the program puts "on CUDA" is a CPU tensor that *says* it is on
``cuda:0`` (``is_cuda``, ``.device``, messages, reports), so the device rules see what they
would see on a real GPU, at the same lines, and PyTorch's own device errors are raised where
CUDA raises them.

How, on top of tensor-dap's stand-in accelerator (:mod:`tensor_dap.testing.standin`: a wrapper
tensor subclass whose ops run on the CPU data):

- :mod:`~tensor_dap.simulate.tensor`: the subclass whose tensors report ``cuda:0``;
- :mod:`~tensor_dap.simulate.mode`: a ``TorchFunctionMode`` below the watch's that reads
  ``"cuda"`` devices (``device=``, ``.to(...)``, ``.cuda()``) as the simulated device;
- :mod:`~tensor_dap.simulate.cuda_api`: ``torch.cuda``'s functions answered by the simulation,
  and a clear stop for what cannot be simulated;
- :mod:`~tensor_dap.simulate.checkpoints`: ``torch.save``/``torch.load`` across the simulated
  device, as on a GPU;
- :mod:`~tensor_dap.simulate.accelerator_api`: ``torch.accelerator`` answered the same way;
- :mod:`~tensor_dap.testing.standin.module_moves` (the stand-in's, set up with it):
  ``model.to("cuda")`` keeps the Parameter objects (tied weights, an optimizer built before the
  move), as on a GPU;
- :mod:`~tensor_dap.simulate.in_backward`: the Python autograd runs in ``backward()`` (custom
  Functions, hooks, checkpointing's recomputation) under the simulation too;
- :mod:`~tensor_dap.simulate.distributed`: torchrun ranks, NCCL answered by gloo;
- :mod:`~tensor_dap.simulate.ddp`: ``DistributedDataParallel`` of a simulated module;
- :mod:`~tensor_dap.simulate.stop`: the one-line stop for what cannot be simulated.

Child processes of a run start it too (``ChildConfig.simulate``, :mod:`tensor_dap.agent.child`).

:func:`start` sets it all up once per process, before the watch starts (the mode must be below
the watch's on the torch-function stack, so that the watch sees the user's own arguments).
"""

from __future__ import annotations

from typing import Optional

from tensor_dap.catalog import SIMULATE_KINDS

__all__ = ["KINDS", "simulated", "start"]

#: what ``--simulate`` accepts
KINDS = SIMULATE_KINDS

_started: Optional[str] = None


def simulated() -> Optional[str]:
    """The device kind simulated in this process (``"cuda"``), or None."""
    return _started


def start(kind: str) -> None:
    """Simulate ``kind`` (one of :data:`KINDS`) in this process from now on; idempotent."""
    global _started
    if kind not in KINDS:
        raise ValueError(f"cannot simulate {kind!r}; one of: {', '.join(KINDS)}")
    if _started is not None:
        return
    from tensor_dap.simulate import (
        accelerator_api,
        cuda_api,
        data_parallel,
        in_backward,
        legacy_types,
        mode,
        subclasses,
        tensor,
    )

    tensor.install()
    subclasses.install()
    cuda_api.install()
    accelerator_api.install()
    in_backward.install()
    data_parallel.install()
    legacy_types.install()
    mode.install()
    _started = kind
