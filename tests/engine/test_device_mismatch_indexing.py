"""``device-mismatch`` on indexing: what PyTorch refuses across devices is reported before it
raises (a CPU lookup table indexed by labels on the device, a write through tensor indices of
values on another device, the target made without ``device=``); what PyTorch allows is not (a
device tensor indexed by CPU indices or a CPU mask, a write through ints and slices, a number
written through device indices)."""

from __future__ import annotations

import inspect
from typing import Any, Callable

import pytest
import torch

import tensor_dap
from tensor_dap.testing import accelerator_device


def _findings(program: Callable[[], Any]) -> list[tuple[int, str]]:
    with tensor_dap.watch(rules=["device-mismatch"]) as watch:
        try:
            program()
        except RuntimeError as error:  # PyTorch's own refusal, after the finding
            assert "device" in str(error)
    source, first = inspect.getsourcelines(program)
    return [(f.line - first, f.message) for f in watch.findings]


def cpu_table_device_labels() -> None:
    class_weights = torch.tensor([1.0, 2.0, 0.5])  # made without device=
    labels = torch.tensor([0, 2, 1, 1], device=accelerator_device())
    class_weights[labels]


def write_of_device_values_into_a_cpu_buffer() -> None:
    targets = torch.zeros(4, 3)
    rows = torch.tensor([0, 2], device=accelerator_device())
    targets[rows, 0] = torch.ones(2, device=accelerator_device())


def index_put_of_device_values() -> None:
    targets = torch.zeros(4)
    rows = torch.tensor([1, 3], device=accelerator_device())
    targets.index_put_((rows,), torch.ones(2, device=accelerator_device()))


def test_what_pytorch_refuses_is_reported_at_its_line(engine_path) -> None:  # noqa: ANN001
    ((line, message),) = _findings(cpu_table_device_labels)
    assert line == 3
    assert message.startswith("`class_weights[labels]`: class_weights is on cpu (created at")
    assert "labels is on accel:0" in message and "Create class_weights with device=" in message
    ((line, message),) = _findings(write_of_device_values_into_a_cpu_buffer)
    assert line == 3 and "targets is on cpu" in message and "Create targets with device=" in message
    ((line, _),) = _findings(index_put_of_device_values)
    assert line == 3


def allowed_indexing() -> None:
    device = accelerator_device()
    x = torch.randn(5, 3, device=device)
    x[torch.tensor([0, 4])]  # CPU indices into a device tensor
    x[torch.tensor([True, False, True, False, True])]  # a CPU mask
    x[0] = torch.ones(3)  # through an int: a copy into a view
    x[torch.tensor([1, 2], device=device)] = 0.0  # a number through device indices
    x[torch.tensor([1, 2])] = torch.tensor(2.0)  # a 0-dim CPU value
    host = torch.zeros(5, 3)
    host[torch.tensor([1, 2])] = torch.ones(2, 3)  # all on the CPU
    host[0] = x[0]  # a device row copied into a host row


@pytest.mark.parametrize("program", [allowed_indexing])
def test_what_pytorch_allows_is_not_reported(program, engine_path) -> None:  # noqa: ANN001
    program()  # runs, as on CUDA
    assert _findings(program) == []


def test_a_jagged_nested_tensors_sequence_lengths_are_host_tensors() -> None:
    """``torch.nested.nested_tensor(..., layout=torch.jagged)`` keeps its min and max sequence
    lengths as the sizes of empty host tensors, on every device: the view it makes of device
    values and offsets with them is no mismatch."""
    import contextlib

    from torch.nested._internal.nested_tensor import _nt_view_dummy

    device = accelerator_device()
    values = torch.ones(6, 3, device=device)
    offsets = torch.tensor([0, 2, 6], device=device)
    lengths = torch.zeros(2, 0), torch.zeros(4, 0)
    with tensor_dap.watch(rules=["device-mismatch"]) as watch, contextlib.suppress(Exception):
        torch._nested_view_from_jagged(values, offsets, _nt_view_dummy(), None, 1, *lengths)
    assert watch.findings == []
