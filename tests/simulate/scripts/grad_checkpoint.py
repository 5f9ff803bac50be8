"""Activation checkpointing on CUDA under autocast, as large models train: the recomputation in
backward() makes its position tensor on ``x.device`` and runs in bfloat16, as the forward did."""

import copy

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1], device=x.device, dtype=x.dtype)
        return x + torch.relu(self.proj(self.norm(x + positions[None, :, None] / 100)))


blocks = nn.Sequential(*(Block(16) for _ in range(3))).to(device)
reference = copy.deepcopy(blocks)
x = torch.randn(4, 8, 16, device=device)
for reentrant in (False, True):
    blocks.zero_grad()
    reference.zero_grad()
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        h = x.requires_grad_() if reentrant else x
        for block in blocks:
            h = checkpoint(block, h, use_reentrant=reentrant)
        plain = reference(x)
    h.float().pow(2).mean().backward()
    plain.float().pow(2).mean().backward()
    for ours, theirs in zip(blocks.parameters(), reference.parameters()):
        assert torch.allclose(ours.grad, theirs.grad, atol=1e-2), (reentrant, ours.grad.dtype)
out = checkpoint_sequential(blocks, 3, x, use_reentrant=False)
out.sum().backward()
print("OK")
