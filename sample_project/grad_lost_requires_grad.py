"""A hand-written parameter created without `requires_grad=True`.

Neither `w` nor `x` requires grad, so `y = w * x` has no grad history and neither does the loss;
`loss.backward()` cannot run. PyTorch raises "RuntimeError: element 0 of tensors does not
require grad and does not have a grad_fn" at the backward() line.
"""

import torch

if not torch.cuda.is_available():
    raise SystemExit("this needs a GPU (or: tensor-dap check --simulate cuda)")
device = torch.device("cuda:0")

w = torch.tensor([1.0], device=device)  # meant: requires_grad=True
x = torch.tensor([2.0], device=device)
target = torch.tensor([6.0], device=device)

for step in range(3):
    y = w * x
    loss = ((y - target) ** 2).sum()
    loss.backward()  # expect: grad-lost
    with torch.no_grad():
        w -= 0.1 * w.grad
    print(f"step {step}: w={w.item():.3f} loss={loss.item():.3f}")
