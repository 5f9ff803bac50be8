"""A VAE's reparameterisation writes the noise into ``std`` in place.

``torch.exp`` saves its output for backward; ``std.mul_(eps)`` bumps its version, so
``loss.backward()`` fails: "... output 0 of ExpBackward0, is at version 1; expected version 0".
"""

import torch
from kinds import device, kind
from torch import nn

torch.manual_seed(0)

encoder = nn.Linear(6, 4).to(device())
x = kind(torch.randn(3, 6))
h = encoder(x)
mu, logvar = h[:, :2], h[:, 2:]
std = torch.exp(0.5 * logvar)
eps = torch.randn_like(std)
z = std.mul_(eps).add_(mu)  # expect: inplace-saved
loss = z.pow(2).sum()
loss.backward()
