"""A minGPT-style decoder-only Transformer, modelled on karpathy/minGPT ``model.py``
(``CausalSelfAttention`` with a ``register_buffer("bias", torch.tril(...))`` causal mask applied
with ``masked_fill(..., float('-inf'))``, ``Block``, token + learned position embeddings,
``configure_optimizers``-like AdamW, ``clip_grad_norm_``), on a synthetic copy task.

Bug variants (first argument):
- ``mask-attribute``: the causal mask stored as a plain attribute instead of a buffer, so
  ``model.to(device)`` leaves it on the CPU.
- ``pad-mask-after-softmax``: padded keys zeroed with ``att.masked_fill_(pad, 0.0)`` after the
  softmax, which saved ``att`` for backward.
- ``smoothed-loss-graph``: the logged smoothed loss adds ``0.1 * loss``, not ``loss.item()``: it
  keeps every iteration's graph.
- ``attn-dropout-inplace``: the attention dropout made ``nn.Dropout(0.1, inplace=True)`` to save
  memory: it writes the softmax's output, which the softmax saved for backward.
"""

import math
import sys

import torch
import torch.nn as nn
from torch.nn import functional as F

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""
VOCAB, BLOCK, N_EMBD, N_HEAD, PAD = 8, 12, 32, 4, 0


class CausalSelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD)
        self.attn_dropout = nn.Dropout(0.1, inplace=BUG == "attn-dropout-inplace")
        mask = torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK)
        if BUG == "mask-attribute":
            self.bias = mask
        else:
            self.register_buffer("bias", mask)

    def forward(self, x, pad):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(N_EMBD, dim=2)
        k = k.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        q = q.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        v = v.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        causal = self.bias[:, :, :T, :T]
        att = att.masked_fill(causal == 0, float("-inf"))  # bug[mask-attribute]: device-mismatch
        if BUG == "pad-mask-after-softmax":
            att = F.softmax(att, dim=-1)
            pad_keys = pad[:, None, None, :]
            att.masked_fill_(pad_keys, 0.0)  # bug[pad-mask-after-softmax]: inplace-saved
        else:
            att = F.softmax(att, dim=-1)  # padded targets are ignored by the loss instead
        y = self.attn_dropout(att) @ v  # bug[attn-dropout-inplace]: inplace-saved
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(N_EMBD), nn.LayerNorm(N_EMBD)
        self.attn = CausalSelfAttention()
        self.mlp = nn.Sequential(
            nn.Linear(N_EMBD, 4 * N_EMBD), nn.GELU(), nn.Linear(4 * N_EMBD, N_EMBD)
        )

    def forward(self, x, pad):
        x = x + self.attn(self.ln_1(x), pad)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, N_EMBD)
        self.wpe = nn.Embedding(BLOCK, N_EMBD)
        self.h = nn.ModuleList([Block() for _ in range(2)])
        self.ln_f = nn.LayerNorm(N_EMBD)
        self.lm_head = nn.Linear(N_EMBD, VOCAB, bias=False)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device).unsqueeze(0)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x, idx == PAD)
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    seqs = torch.randint(1, VOCAB, (32, BLOCK + 1))
    seqs[:, 6:] = seqs[:, :7]  # second half copies the first
    seqs[:8, :3] = PAD  # some left-padded sequences
    x, y = seqs[:, :-1].to(device), seqs[:, 1:].clone()
    y[y == PAD] = -1
    y = y.to(device)
    model = GPT().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95))

    model.train()
    smoothed = 0.0
    for it in range(8):
        logits, loss = model(x, y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if BUG == "smoothed-loss-graph":
            smoothed = 0.9 * smoothed + 0.1 * loss  # bug[smoothed-loss-graph]: graph-kept
        else:
            smoothed = 0.9 * smoothed + 0.1 * loss.item()
        if it % 2 == 1:
            print(f"iter {it}: train loss {loss.item():.5f}, smoothed {smoothed:.5f}")


if __name__ == "__main__":
    main()
