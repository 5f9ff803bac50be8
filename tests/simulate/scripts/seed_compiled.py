"""Seed: a CPU tensor made inside the forward of a compiled model (``torch.compile``)."""

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        noise = torch.randn(x.shape[0], 4)
        return self.fc(x) + noise  # BUG


device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.compile(Net().to(device))
out = model(torch.randn(2, 4, device=device))
out.sum().backward()
