"""Single-image super-resolution with sub-pixel convolution, modelled on pytorch/examples
``super_resolution`` (``Net`` with ``nn.PixelShuffle(upscale_factor)``, MSE loss, PSNR
``10 * log10(1 / mse)``), on synthetic smooth images downsampled by average pooling.

Bug variants (first argument):
- ``no-grad-clamp``: the output clamped to ``[0, 1]`` by a helper decorated
  ``@torch.no_grad()`` (written for post-processing) before the loss.
- ``target-broadcast``: a hand-written MSE between the ``(B, 1, H, W)`` output and targets kept
  as ``(B, H, W)``: ``(B, B, H, W)``.
- ``zero-grad-after-backward``: ``optimizer.zero_grad()`` moved between ``loss.backward()`` and
  ``optimizer.step()``: every step applies no gradient and the loss never moves.
"""

import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""
UPSCALE = 2


class Net(nn.Module):
    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 16, 5, 1, 2)
        self.conv2 = nn.Conv2d(16, 16, 3, 1, 1)
        self.conv3 = nn.Conv2d(16, upscale_factor**2, 3, 1, 1)
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        return self.pixel_shuffle(self.conv3(x))


@torch.no_grad()
def to_image_range(img: torch.Tensor) -> torch.Tensor:
    return img.clamp(0.0, 1.0)


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    base = torch.rand(32, 1, 4, 4)
    targets = F.interpolate(base, scale_factor=4, mode="bilinear", align_corners=False)
    inputs = F.avg_pool2d(targets, UPSCALE)
    targets = targets.squeeze(1)  # (B, H, W), as a grayscale loader yields them
    model = Net(UPSCALE).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

    for epoch in range(1, 4):
        epoch_loss = 0.0
        for i in range(0, len(inputs), 8):
            input, target = inputs[i : i + 8].to(device), targets[i : i + 8].to(device)
            if BUG != "zero-grad-after-backward":
                optimizer.zero_grad()
            output = model(input)
            if BUG == "no-grad-clamp":
                output = to_image_range(output)
            if BUG == "target-broadcast":
                loss = ((output - target) ** 2).mean()  # bug[target-broadcast]: broadcast
            else:
                loss = ((output - target.unsqueeze(1)) ** 2).mean()
            epoch_loss += loss.item()
            loss.backward()  # bug[no-grad-clamp]: grad-lost
            if BUG == "zero-grad-after-backward":
                optimizer.zero_grad()  # bug[zero-grad-after-backward]: grad-lost
            optimizer.step()
        mse = epoch_loss / 4
        print(f"===> Epoch {epoch}: Avg. Loss: {mse:.5f} PSNR: {10 * math.log10(1 / mse):.2f} dB")


if __name__ == "__main__":
    main()
