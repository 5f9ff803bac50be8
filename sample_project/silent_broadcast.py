"""TorchSnooper's linear-regression example: targets of shape (4,) against predictions (4, 1).

`y - pred` broadcasts (4,) and (4, 1) to a (4, 4) matrix, so every prediction is compared with
every target. PyTorch says nothing; the model simply cannot fit (y = 3 + x0 + 2*x1 is exactly
learnable, yet the loss stalls far above zero). `F.mse_loss` would at least warn.
"""

import torch
import torch.nn as nn

# a shape bug: it shows on any device, so plain `python` on a laptop shows it as a GPU would

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)

x = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], device=device)
y = torch.tensor([3.0, 5.0, 4.0, 6.0], device=device)

model = nn.Linear(2, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for _ in range(200):
    optimizer.zero_grad()
    pred = model(x)
    squared_diff = (y - pred) ** 2  # expect: broadcast
    loss = squared_diff.mean()
    loss.backward()
    optimizer.step()

print(f"final loss {loss.item():.4f} (a correct fit reaches ~0)")
