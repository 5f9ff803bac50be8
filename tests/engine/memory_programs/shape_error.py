"""A RuntimeError that is not about memory: out-of-memory stays silent."""

import torch

a = torch.ones(3, 4)
b = torch.ones(5, 6)
c = a @ b
