"""The prediction is detached (to "save memory") before the loss is computed.

`.detach()` cuts the graph, so the loss has no history back to the model's weights and
`loss.backward()` has nothing to differentiate. PyTorch raises "RuntimeError: element 0 of
tensors does not require grad and does not have a grad_fn" at the backward() line.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

# written for a GPU (`.cuda()` below); without one, run it under `tensor-dap check --simulate cuda`

torch.backends.cudnn.deterministic = True
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 4).cuda()
y = x.sum(dim=1, keepdim=True)

for step in range(3):
    optimizer.zero_grad()
    pred = model(x).detach()
    loss = F.mse_loss(pred, y)
    loss.backward()  # expect: grad-lost
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")
