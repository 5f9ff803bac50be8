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
