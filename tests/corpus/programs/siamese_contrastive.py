"""A siamese embedding network trained with the contrastive loss of Hadsell, Chopra & LeCun
(2006), modelled on the many ``ContrastiveLoss`` modules of siamese-network tutorials: the
Euclidean distance of two embeddings, ``y * d^2 + (1 - y) * relu(margin - d)^2``, on pairs
from synthetic clusters, batches padded to a fixed size with all-zero pairs that the loss masks
out.

Bug variant (first argument):
- ``sqrt-distance``: the distance written as ``torch.sqrt(((a - b) ** 2).sum(1))`` instead of
  ``F.pairwise_distance`` (which adds ``eps``): for the identical padding pairs the forward is
  ``sqrt(0) = 0``, finite, but the backward of ``sqrt`` at 0 is ``inf`` and ``inf * 0`` makes
  the gradients NaN. The finding belongs to the forward ``torch.sqrt``.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""
MARGIN, BATCH = 2.0, 24


class EmbeddingNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x1, x2):
        return self.net(x1), self.net(x2)


def contrastive_loss(out1, out2, same, valid):
    if BUG == "sqrt-distance":
        dist = torch.sqrt(((out1 - out2) ** 2).sum(dim=1))  # bug[sqrt-distance]: nan-inf
    else:
        dist = F.pairwise_distance(out1, out2)
    losses = same * dist.pow(2) + (1 - same) * F.relu(MARGIN - dist).pow(2)
    return (losses * valid).sum() / valid.sum()


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    centres = torch.randn(3, 6) * 2
    model = EmbeddingNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    for step in range(6):
        n = 20
        c1, c2 = torch.randint(0, 3, (n,)), torch.randint(0, 3, (n,))
        x1 = torch.cat([centres[c1] + 0.3 * torch.randn(n, 6), torch.zeros(BATCH - n, 6)])
        x2 = torch.cat([centres[c2] + 0.3 * torch.randn(n, 6), torch.zeros(BATCH - n, 6)])
        same = torch.cat([(c1 == c2).float(), torch.ones(BATCH - n)])
        valid = torch.cat([torch.ones(n), torch.zeros(BATCH - n)])
        x1, x2, same, valid = x1.to(device), x2.to(device), same.to(device), valid.to(device)
        optimizer.zero_grad()
        out1, out2 = model(x1, x2)
        loss = contrastive_loss(out1, out2, same, valid)
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
