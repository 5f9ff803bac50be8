"""An in-place write into a tensor autograd saved: PyTorch's error names the tensor as on a GPU
(``torch.cuda.FloatTensor``), not as the stand-in the simulation runs it on."""

import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
w = torch.randn(4, 3, device=device, requires_grad=True)
h = (w * 2).exp()
h /= h.norm(dim=1, keepdim=True)  # BUG
h.sum().backward()
