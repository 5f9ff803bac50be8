"""A tensor rebound to another name, written there; then another one freed."""

import torch

original = torch.zeros(2)
doomed = torch.zeros(2)
items = {"first": torch.zeros(3)}
pass  # line 8: the breakpoint line
renamed = original
del original
renamed.sub_(1)  # line 11: written under its new name
del doomed  # line 12: freed
items["first"].add_(2)  # line 13: a container's element
print("done")
