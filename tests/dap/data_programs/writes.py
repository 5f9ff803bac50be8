"""Writes into tensors, one kind per line (tests/dap/test_data_breakpoints.py stops on them)."""

import torch

w = torch.zeros(4)
other = torch.ones(4)
scratch = other * 2  # line 7: the breakpoint line
scratch.add_(1)  # writes another tensor: no stop
w.add_(1)  # line 9: in-place op
w[0] = 5.0  # line 10: indexed assignment
view = w[1:]
view.mul_(3)  # line 12: a write through a view
w.data = torch.full((4,), float("nan"))  # line 13: a .data write
w.copy_(torch.ones(4))  # line 14: copy_
print("done")
