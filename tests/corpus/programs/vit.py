"""A small Vision Transformer, modelled on lucidrains/vit-pytorch and timm's
``VisionTransformer``: a conv patch embedding, a learned ``cls_token`` and position embedding
(``nn.Parameter``), pre-norm encoder blocks and a linear head on the class token.

Bug variants (first argument):
- ``cls-token-tensor``: the class token made a plain tensor attribute instead of an
  ``nn.Parameter``, so ``model.to(device)`` leaves it on the CPU (and it would never train).
- ``preds-tolist``: the predictions are copied to a Python list every step for accuracy.
"""

import sys

import torch
import torch.nn as nn

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""


class PatchEmbed(nn.Module):
    def __init__(self, img_size: int, patch_size: int, dim: int) -> None:
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(1, dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)  # (B, N, dim)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, img_size=16, patch_size=4, dim=32, depth=2, heads=4, num_classes=3):
        super().__init__()
        self.patch_embed = PatchEmbed(img_size, patch_size, dim)
        if BUG == "cls-token-tensor":
            self.cls_token = torch.zeros(1, 1, dim)
        else:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, self.patch_embed.num_patches + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x)
        cls_tokens = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)  # bug[cls-token-tensor]: device-mismatch
        x = x + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    labels = torch.randint(0, 3, (48,))
    images = torch.randn(48, 1, 16, 16) * 0.5
    images[labels == 1, :, :8] += 1.0
    images[labels == 2, :, :, :8] -= 1.0
    model = ViT().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)

    for epoch in range(3):
        model.train()
        correct, seen = 0, 0
        for i in range(0, len(images), 16):
            x, y = images[i : i + 16].to(device), labels[i : i + 16].to(device)
            optimizer.zero_grad()
            logits = model(x)
            loss = criterion(logits, y)
            loss.backward()
            optimizer.step()
            if BUG == "preds-tolist":
                preds = logits.argmax(dim=-1).tolist()  # bug[preds-tolist]: leaves-device
                targets = y.tolist()  # bug[preds-tolist]: leaves-device
                correct += sum(int(p == t) for p, t in zip(preds, targets))
            else:
                correct += int((logits.argmax(dim=-1) == y).sum())
            seen += len(y)
        print(f"epoch {epoch}: loss {loss.item():.4f} acc {correct / seen:.3f}")


if __name__ == "__main__":
    main()
