"""A hand-written Swish (``autograd.Function``) saves its output with ``ctx.save_for_backward``;
the next layer, ``nn.Dropout(inplace=True)``, writes into it.

``loss.backward()`` fails: "... output 0 of SwishFn, is at version 1; expected version 0".
"""

import torch
import torch.nn.functional as F
from kinds import device, kind
from torch import nn

torch.manual_seed(0)


class SwishFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):  # noqa: ANN001, ANN205
        result = x * torch.sigmoid(x)
        ctx.save_for_backward(x, result)
        return result

    @staticmethod
    def backward(ctx, grad_out):  # noqa: ANN001, ANN205
        x, result = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_out * (s + result * (1 - s))


class Swish(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return SwishFn.apply(x)


model = nn.Sequential(nn.Linear(6, 8), Swish(), nn.Dropout(0.1, inplace=True), nn.Linear(8, 2))
model = model.to(device())
x = kind(torch.randn(4, 6))
y = torch.tensor([0, 1, 0, 1], device=device())
loss = F.cross_entropy(model(x), y)  # expect: inplace-saved
loss.backward()
