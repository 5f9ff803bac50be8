"""A small training loop: a parameter is written by the optimizer only."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.register_buffer("seen", torch.zeros(1))

    def forward(self, x):
        self.seen += x.shape[0]  # line 14: the buffer's write
        return self.fc(x)


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
x = torch.randn(8, 4)
for _step in range(3):
    optimizer.zero_grad()  # line 23: the breakpoint line
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()  # line 26: the parameter's write
print("done")
