"""A tensor written many times; it becomes non-finite once, and big once."""

import torch

state = torch.ones(3)
batches = [torch.ones(3)] * 3
for step in range(6):
    if step == 4:
        state.mul_(float("inf"))  # line 9: becomes non-finite
    else:
        state.add_(1)  # line 11: ordinary writes
print("done")
