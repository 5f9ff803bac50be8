"""Module tensors that do move with the model, or are moved where they are used, or never meet
the device: none of them is a plain-tensor-attribute."""

import math

import torch
import torch.nn.functional as F
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, block_size):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.register_buffer(
            "bias",
            torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size),
        )
        self.cls_token = nn.Parameter(torch.zeros(1, 1, n_embd))

    def forward(self, x):
        T = x.size(1)
        return x.masked_fill(self.bias[0, 0, :T, :T] == 0, 0.0) + self.cls_token


class MovesItsOwn(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.class_weights = torch.tensor([1.0, 2.0, 5.0])
        self.mean = torch.tensor([0.485, 0.456, 0.406])
        self.std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

    def forward(self, x, y):
        weights = self.class_weights.to(x.device)
        return F.cross_entropy(self.fc(x), y, weight=weights)

    def denormalize(self, image):
        return image.cpu() * self.std + self.mean.view(3, 1, 1)


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(4, 8)
        self.hidden = torch.zeros(1, 1, 8)

    def forward(self, x):
        out, self.hidden = self.rnn(x, self.hidden)
        return out


class LitModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(28 * 28, 10)
        self.example_input_array = torch.zeros(1, 28 * 28)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.layer(x.view(x.size(0), -1)), y)


model = CausalSelfAttention(32, 16).to(device)


class Contrastive(nn.Module):
    """0-dim tensors mix with device tensors as numbers do; host reads and moves by name."""

    def __init__(self, temperature=0.07, use_cuda=True):
        super().__init__()
        self.inv_temp = torch.tensor(1 / temperature)
        self.logit_scale = torch.tensor(math.log(1 / temperature))
        self.mean = torch.tensor([0.5, 0.5, 0.5])
        self.sizes = torch.tensor([8, 16, 32])
        self.idx = torch.arange(4)
        self.w = torch.randn(4, 4)
        self.mask = torch.ones(4, 4).tril()
        if use_cuda:
            self.mask = self.mask.cuda()
        self.pe = torch.randn(16, 4)
        self.pe = nn.Parameter(self.pe)

    def forward(self, x):
        mean = torch.as_tensor(self.mean, device=x.device)
        strides = self.sizes.tolist()
        w = self.w
        w = w.to(x.device)
        picked = x[:, self.idx]
        out = (picked @ w) * self.inv_temp * self.logit_scale.exp() + mean.sum() * strides[0]
        return out + self.mask.sum() + self.pe.sum()
