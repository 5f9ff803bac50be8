"""Hinton's Forward-Forward algorithm, modelled on pytorch/examples ``mnist_forward_forward``
(``overlay_y_on_x``, a ``Layer(nn.Linear)`` with its own optimizer trained on
``log(1 + exp(cat([-g_pos + threshold, g_neg - threshold])))``, inputs normalised by their L2
norm, ``h_pos.detach()`` passed to the next layer), on synthetic "images".

Bug variant (first argument):
- ``norm-no-eps``: the per-sample L2 normalisation without its ``+ 1e-4``; a blank (all-zero)
  image in the batch gives ``0 / 0`` = NaN, which then flows through ``torch.cat`` into every
  loss: the NaN is born at the division, not at the ``cat``.
"""

import sys

import torch
import torch.nn as nn

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""


def overlay_y_on_x(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x_ = x.clone()
    x_[:, :10] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


class Layer(nn.Linear):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features)
        self.relu = torch.nn.ReLU()
        self.opt = torch.optim.Adam(self.parameters(), lr=0.03)
        self.threshold = 2.0

    def forward(self, x):
        if BUG == "norm-no-eps":
            x_direction = x / x.norm(2, 1, keepdim=True)  # bug[norm-no-eps]: nan-inf
        else:
            x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train_step(self, x_pos, x_neg):
        g_pos = self.forward(x_pos).pow(2).mean(1)
        g_neg = self.forward(x_neg).pow(2).mean(1)
        loss = torch.log(
            1 + torch.exp(torch.cat([-g_pos + self.threshold, g_neg - self.threshold]))
        ).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return self.forward(x_pos).detach(), self.forward(x_neg).detach(), loss


class Net(torch.nn.Module):
    def __init__(self, dims) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Layer(dims[d], dims[d + 1]) for d in range(len(dims) - 1)])

    def train_layers(self, x_pos, x_neg, epochs: int):
        h_pos, h_neg = x_pos, x_neg
        for i, layer in enumerate(self.layers):
            for _ in range(epochs):
                out_pos, out_neg, loss = layer.train_step(h_pos, h_neg)
            print(f"training layer {i}: loss {loss.item():.4f}")
            h_pos, h_neg = out_pos, out_neg

    def predict(self, x):
        goodness_per_label = []
        for label in range(10):
            h = overlay_y_on_x(x, torch.full((x.shape[0],), label))
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness.append(h.pow(2).mean(1))
            goodness_per_label.append(sum(goodness).unsqueeze(1))
        return torch.cat(goodness_per_label, 1).argmax(1)


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    y = torch.randint(0, 10, (64,))
    x = torch.rand(64, 60) * 0.2
    x[torch.arange(64), 10 + y * 5] = 1.0
    x[7] = 0.0  # a blank image
    net = Net([60, 32, 32]).to(device)
    x_pos = overlay_y_on_x(x, y)
    x_neg = overlay_y_on_x(x, (y + torch.randint(1, 10, (64,))) % 10)
    x_pos, x_neg = x_pos.to(device), x_neg.to(device)
    x_pos[7], x_neg[7] = 0.0, 0.0
    net.train_layers(x_pos, x_neg, epochs=10)
    print(
        f"train error: {1.0 - net.predict(x.to(device)).eq(y.to(device)).float().mean().item():.3f}"
    )


if __name__ == "__main__":
    main()
