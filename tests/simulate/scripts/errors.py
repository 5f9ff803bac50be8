"""PyTorch's own device errors, raised where CUDA raises them (and not where it does not)."""

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.ones(3, device=device)
y = x * torch.tensor(2.0)  # a 0-dim CPU tensor rides along, as on CUDA
z = x[torch.tensor([0, 2])]  # CPU index tensors are accepted, as on CUDA
assert y.is_cuda and z.is_cuda
try:
    x + torch.ones(3)  # expect: device-mismatch (a non-scalar CPU tensor: CUDA refuses)
except RuntimeError as error:
    assert "cuda:0 and cpu" in str(error), error
else:
    raise SystemExit("no device error")
print("OK")
