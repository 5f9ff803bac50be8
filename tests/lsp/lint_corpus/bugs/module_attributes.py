"""Tensors kept as plain attributes of modules (minGPT's mask, a hand-written positional
encoding, class weights for the loss): model.to(device) leaves them on the CPU."""

import math

import torch
import torch.nn.functional as F
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.n_head = n_head
        mask = torch.tril(torch.ones(block_size, block_size))
        self.bias = mask.view(1, 1, block_size, block_size)  # expect: plain-tensor-attribute

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        return F.softmax(att, dim=-1) @ v


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.pe = pe  # expect: plain-tensor-attribute

    def forward(self, x):
        return x + self.pe[: x.size(0)]


class WeightedClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 3)
        self.class_weights = torch.tensor([1.0, 2.0, 5.0])  # expect: plain-tensor-attribute

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.fc(x), y, weight=self.class_weights)


model = CausalSelfAttention(32, 4, 16).to(device)


class GaussianDiffusion(nn.Module):
    """A DDPM schedule, read by a helper the forward calls."""

    def __init__(self, model, timesteps=1000):
        super().__init__()
        self.model = model
        self.register_buffer("betas", torch.linspace(1e-4, 0.02, timesteps))
        alphas = 1.0 - self.betas
        self.alphas_cumprod = alphas.cumprod(0)  # expect: plain-tensor-attribute
        self.sqrt_alphas_cumprod = self.alphas_cumprod.sqrt()  # expect: plain-tensor-attribute

    def q_sample(self, x_start, t, noise):
        a = self.sqrt_alphas_cumprod[t].view(-1, 1, 1, 1)
        return a * x_start + (1 - self.alphas_cumprod[t]).sqrt().view(-1, 1, 1, 1) * noise

    def forward(self, x_start):
        t = torch.randint(0, len(self.betas), (x_start.size(0),), device=x_start.device)
        noise = torch.randn_like(x_start)
        return F.mse_loss(self.model(self.q_sample(x_start, t, noise)), noise)


class RotaryEmbedding(nn.Module):
    """LLaMA-style cos/sin caches; `.to(dtype=...)` in the forward moves nothing."""

    def __init__(self, dim, max_positions=2048, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        t = torch.arange(max_positions, dtype=inv_freq.dtype)
        emb = torch.cat((torch.einsum("i,j->ij", t, inv_freq),) * 2, dim=-1)
        self.cos_cached: torch.Tensor = emb.cos()[None, None]  # expect: plain-tensor-attribute
        self.sin_cached = emb.sin()[None, None]  # expect: plain-tensor-attribute

    def forward(self, x, seq_len):
        self.cos_cached.to(x.device)  # (the result is thrown away)
        cos = self.cos_cached[:, :, :seq_len].to(dtype=x.dtype)
        return cos, self.sin_cached[:, :, :seq_len].to(dtype=x.dtype)


class AttentionBase(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)


class Windowed(AttentionBase):
    def __init__(self, dim, n):
        super().__init__(dim)
        pos = torch.arange(n).float()[:, None]
        freq = torch.exp(-torch.arange(0, dim, 2).float() / dim)
        a = pos * freq
        self.s, self.c = a.sin(), a.cos()  # expect: plain-tensor-attribute, plain-tensor-attribute

    def forward(self, x):
        T = x.size(1)
        return x[..., ::2] * self.c[:T] + x[..., 1::2] * self.s[:T]
