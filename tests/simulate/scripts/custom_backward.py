"""Python that autograd runs in backward() on CUDA: a straight-through estimator's custom
Function (a tensor made on ``g.device`` in its backward), a gradient-reversal layer, a tensor
hook and a module's full backward hook that make tensors on the gradient's device, under
``backward()`` and ``torch.autograd.grad`` (a gradient penalty)."""

import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)


class StraightThroughSign(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sign(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        window = torch.ones(grad.shape, device=grad.device)
        return grad * window * (x.abs() <= 1)


class ReverseGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.neg() * torch.full((), ctx.alpha, device=grad.device), None


seen = []
encoder = nn.Linear(6, 8).to(device)
head = nn.Linear(8, 2).to(device)
head.register_full_backward_hook(lambda m, gin, gout: seen.append(gout[0].device.type))
x = torch.randn(4, 6, device=device, requires_grad=True)
codes = StraightThroughSign.apply(encoder(x))
codes.register_hook(lambda g: g + torch.zeros(g.shape, device=g.device))
out = head(ReverseGrad.apply(codes, 0.5))
out.square().mean().backward()
assert encoder.weight.grad.device.type == x.grad.device.type == device.type
assert seen == [device.type], seen
(gx,) = torch.autograd.grad(
    head(StraightThroughSign.apply(encoder(x))).sum(), [x], create_graph=True
)
penalty = ((gx.norm(2, dim=1) - 1) ** 2).mean()
penalty.backward()
assert gx.device.type == device.type
print("OK")
