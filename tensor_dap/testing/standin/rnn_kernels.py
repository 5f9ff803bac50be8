"""CPU versions of the fused recurrent-cell kernels PyTorch has only for GPUs.

``nn.LSTM``/``nn.GRU`` (and their cells) take the fused-cell path for every non-CPU device,
PrivateUse1 included, so the stand-in accelerator must supply these ops.  They are the same maths
on the CPU, with the same workspace layout as the CUDA kernels, so autograd's formulas apply
unchanged.  :data:`CPU_KERNELS` maps each aten op to its kernel; the stand-in's dispatch runs an op
found there instead of the op itself.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

__all__ = ["CPU_KERNELS"]

_aten = torch.ops.aten


def _add_biases(
    input_gates: torch.Tensor,
    hidden_gates: torch.Tensor,
    input_bias: Optional[torch.Tensor] = None,
    hidden_bias: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The input and hidden gate pre-activations with their optional biases added.

    Both fused cells take the biases as optional trailing arguments (absent for ``bias=False``).
    """
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    return input_gates, hidden_gates


def _lstm_cell(
    input_gates: torch.Tensor,
    hidden_gates: torch.Tensor,
    cx: torch.Tensor,
    *biases: Optional[torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_thnn_fused_lstm_cell``: (hy, cy, workspace of the four activated gates)."""
    input_gates, hidden_gates = _add_biases(input_gates, hidden_gates, *biases)
    gates = input_gates + hidden_gates
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
    """``_thnn_fused_lstm_cell_backward_impl``: (grad of the gates, grad of cx, grad of bias)."""
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
    *biases: Optional[torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``_thnn_fused_gru_cell``: (hy, workspace of r, z, n, hx and the hidden candidate)."""
    input_gates, hidden_gates = _add_biases(input_gates, hidden_gates, *biases)
    ir, ii, in_ = input_gates.chunk(3, 1)
    hr, hi, hn = hidden_gates.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, hn], 1)


def _gru_cell_backward(
    grad_hy: torch.Tensor, workspace: torch.Tensor, has_bias: bool
) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor]
]:
    """``_thnn_fused_gru_cell_backward``: grads of the input gates, hidden gates, hx, biases."""
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
    return grad_input_gates, grad_hidden_gates, grad_hx, None, None


CPU_KERNELS: dict[Any, Callable[..., Any]] = {
    _aten._thnn_fused_lstm_cell.default: _lstm_cell,
    _aten._thnn_fused_lstm_cell_backward_impl.default: _lstm_cell_backward,
    _aten._thnn_fused_gru_cell.default: _gru_cell,
    _aten._thnn_fused_gru_cell_backward.default: _gru_cell_backward,
}
"""The aten ops above and the kernel that serves each on the stand-in."""
