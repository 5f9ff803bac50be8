"""A small U-Net for binary segmentation, modelled on milesial/Pytorch-UNet (``DoubleConv``,
``Down``, ``Up`` with skip concatenation, ``BCEWithLogitsLoss`` + ``dice_loss``), on synthetic
images of bright discs and their masks.

Bug variants (first argument):
- ``dice-broadcast``: the ``(B, 1, H, W)`` probabilities multiplied by ``(B, H, W)`` masks in
  the hand-written Dice loss (``unsqueeze(1)`` forgotten): the product is ``(B, B, H, W)``.
- ``zero-border-inplace``: the image border is ignored by writing ``probs[..., 0] = 0`` into
  the sigmoid output that autograd saved.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""


class DoubleConv(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.double_conv = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        return self.double_conv(x)


class Up(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, in_channels // 2, 2, stride=2)
        self.conv = DoubleConv(in_channels, out_channels)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        return self.conv(torch.cat([x2, x1], dim=1))


class UNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inc = DoubleConv(1, 8)
        self.down1 = nn.Sequential(nn.MaxPool2d(2), DoubleConv(8, 16))
        self.down2 = nn.Sequential(nn.MaxPool2d(2), DoubleConv(16, 32))
        self.up1 = Up(32, 16)
        self.up2 = Up(16, 8)
        self.outc = nn.Conv2d(8, 1, 1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x = self.up1(self.down2(x2), x2)
        return self.outc(self.up2(x, x1))


def dice_loss(probs: torch.Tensor, masks: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    if BUG == "dice-broadcast":
        inter = (probs * masks).sum(dim=(-2, -1))  # bug[dice-broadcast]: broadcast
    else:
        inter = (probs * masks.unsqueeze(1)).sum(dim=(-2, -1))
    union = probs.sum(dim=(-2, -1)) + masks.unsqueeze(1).sum(dim=(-2, -1))
    return 1 - ((2 * inter + eps) / (union + eps)).mean()


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    centres = torch.randint(4, 12, (24, 2)).float()
    dist = (yy - centres[:, 0, None, None]) ** 2 + (xx - centres[:, 1, None, None]) ** 2
    masks = (dist < 9).float()
    images = (masks + 0.3 * torch.randn_like(masks)).unsqueeze(1)
    model = UNet().to(device)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3, momentum=0.9)
    criterion = nn.BCEWithLogitsLoss()

    for epoch in range(3):
        for i in range(0, len(images), 8):
            image, mask = images[i : i + 8].to(device), masks[i : i + 8].to(device)
            optimizer.zero_grad(set_to_none=True)
            logits = model(image)
            probs = torch.sigmoid(logits)
            if BUG == "zero-border-inplace":
                probs[..., 0] = 0  # bug[zero-border-inplace]: inplace-saved
            loss = criterion(logits.squeeze(1), mask) + dice_loss(probs, mask)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f} bce {F.mse_loss(probs, mask[:, None]):.4f}")


if __name__ == "__main__":
    main()
