"""A layer's gradient is lost inside the model's forward.

`forward` rebuilds the hidden activations with `torch.tensor(h.tolist())`, cutting `fc1` off the
graph. The loss still has a grad_fn (through `fc2`), so PyTorch raises nothing: `fc1` simply
never trains. tensor-dap reports it at `optimizer.step()`, naming the parameters and where they
were used.
"""

import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if device.type == "cuda":
    torch.backends.cuda.matmul.allow_tf32 = True
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        # the history of fc1 ends here (and .tolist() copies h to the host)
        h = torch.tensor(h.tolist(), device=x.device)  # expect: leaves-device
        return self.fc2(h)


model = Net().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4, device=device), torch.randn(16, 1, device=device)
for _ in range(3):
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()  # expect: grad-lost
print("fc1 got a gradient:", model.fc1.weight.grad is not None)
