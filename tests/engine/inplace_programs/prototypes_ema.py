"""Prototypes updated by an EMA in place while two graphs saved them: the distances that
choose each sample's prototype (feeding ``argmin``: harmless) and the logits of the prototype
classifier (feeding the loss). ``loss.backward()`` reaches the logits' matmul: reported at the
write, naming that one.
"""

import torch
import torch.nn.functional as F
from kinds import device, kind
from torch import nn

torch.manual_seed(0)

encoder = nn.Linear(10, 6).to(device())
prototypes = kind(torch.randn(5, 6))
x, y = kind(torch.randn(32, 10)), torch.randint(0, 5, (32,)).to(device())
z = encoder(x)
distances = z @ prototypes.T
assigned = distances.argmin(1)
logits = z @ prototypes.T / 0.1
with torch.no_grad():
    prototypes.mul_(0.9).add_(0.1 * z.mean(0))  # expect: inplace-saved
loss = F.cross_entropy(logits, y)
loss.backward()
