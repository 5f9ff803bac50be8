"""The optimizer made inside the training loop: Adam starts over at every step.

`optimizer = torch.optim.Adam(model.parameters(), lr=...)` sits inside the batch loop, next
to the lines it is used with. Each new Adam takes one step with fresh moments and a step
count of 0, so every step is Adam's first: its bias-corrected update moves each weight by
about `lr` in the direction of its gradient's sign, whatever the gradient's size. No error;
the loss goes down slowly and then wanders. The finding is at the line that makes it again;
the debugger pauses at the new one's first `optimizer.step()` (`# pauses:`).
"""

import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
inputs = torch.randn(256, 8, device=device)
targets = inputs[:, :2].sum(dim=1, keepdim=True)

for epoch in range(3):
    for start in range(0, 256, 64):
        x, y = inputs[start : start + 64], targets[start : start + 64]
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)  # expect: optimizer-remade
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()  # pauses: optimizer-remade
    print(f"epoch {epoch}: loss {loss.item():.4f}")
