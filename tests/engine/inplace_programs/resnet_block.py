"""A ResNet basic block adds the shortcut in place *after* the ReLU (torchvision adds it before).

``F.relu`` saves its output for backward; ``out += identity`` bumps its version, so
``loss.backward()`` fails: "one of the variables needed for gradient computation has been
modified by an inplace operation: ... output 0 of ReluBackward0".
"""

import torch
import torch.nn.functional as F
from kinds import device, kind
from torch import nn

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = F.relu(self.bn(self.conv(x)))
        out += identity  # expect: inplace-saved
        return out


block = Block(4).to(device())
x = kind(torch.randn(2, 4, 5, 5))
loss = block(x).sum()
loss.backward()
