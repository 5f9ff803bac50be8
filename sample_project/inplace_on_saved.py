"""An activation is shifted in place after another op has used it.

`torch.sigmoid` saves its output `h` for the backward pass; `h += 1` bumps its version, so
autograd refuses at `loss.backward()`: "RuntimeError: one of the variables needed for gradient
computation has been modified by an inplace operation: ... which is output 0 of
SigmoidBackward0, is at version 1; expected version 0 instead." The culprit is the in-place line.
"""

import torch

assert torch.cuda.is_available(), "needs a GPU; without one: tensor-dap check --simulate cuda"

torch.cuda.set_device(0)
torch.manual_seed(0)

x = torch.randn(4, 3).cuda()
w = torch.randn(3, 2, device="cuda", requires_grad=True)
v = torch.randn(4, 2).to("cuda")

h = torch.sigmoid(x @ w)
out = h * v
h += 1  # expect: inplace-saved
loss = out.sum() + h.sum()
loss.backward()
print("grad of w:", w.grad)
