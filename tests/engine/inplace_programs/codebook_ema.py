"""A vector quantiser whose codebook follows an EMA of the encodings, written in place under
``no_grad`` while a soft assignment over the distances to it is still to be backpropagated.

``z @ codebook.weight.t()`` saved the codebook; ``codebook.weight.copy_(...)`` bumps its
version, so ``loss.backward()`` fails: "... is at version 1; expected version 0". Only that
backward says the write mattered (the distances' graph alone, feeding ``argmin``, would not):
the finding comes then, at the write's line.
"""

import torch
import torch.nn.functional as F
from kinds import device, kind
from torch import nn

torch.manual_seed(0)

encoder = nn.Linear(6, 4).to(device())
codebook = nn.Embedding(8, 4).to(device())
codebook.weight.requires_grad_(False)
ema_weight = codebook.weight.detach().clone()
z = encoder(kind(torch.randn(16, 6)))
distances = (z**2).sum(1, keepdim=True) + (codebook.weight**2).sum(1) - 2 * z @ codebook.weight.t()
codes = distances.argmin(1)
soft = F.softmax(-distances, dim=1)
with torch.no_grad():
    ema_weight.mul_(0.99).add_(z.mean(0), alpha=0.01)
    codebook.weight.copy_(ema_weight)  # expect: inplace-saved
entropy = -(soft * torch.log(soft + 1e-9)).sum(1).mean()
loss = F.mse_loss(z, codebook(codes)) + 0.1 * entropy
loss.backward()
