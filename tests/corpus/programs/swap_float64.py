"""Training a model in float64 (converted after its optimizer was built), modelled on PyTorch's
``torch.__future__.set_swap_module_params_on_conversion(True)`` (``module.to(dtype)`` swaps
the parameters' contents in place with ``torch.utils.swap_tensors``, so an optimizer made
before keeps working) and the weight-normalised linear layers of older research code
(``w = g * v / ||v||``, as ``torch.nn.utils.weight_norm`` computes it).

Bug variant (first argument):
- ``norm-through-data``: the layer's norm computed on ``self.v.data`` "because the norm should
  not be differentiated": ``v`` only gets gradient through the numerator, while ``g`` never
  gets any gradient at all because ``self.g.data`` is used too; ``g`` never trains.
"""

import pickle
import sys

import torch
import torch.nn as nn

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""


class WNLinear(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.v = nn.Parameter(torch.randn(out_features, in_features) * 0.3)
        self.g = nn.Parameter(torch.ones(out_features, 1))
        self.b = nn.Parameter(torch.zeros(out_features))

    def forward(self, x):
        if BUG == "norm-through-data":
            w = self.g.data * self.v / self.v.data.norm(dim=1, keepdim=True)
        else:
            w = self.g * self.v / self.v.norm(dim=1, keepdim=True)
        return x @ w.t() + self.b


def main() -> None:
    torch.__future__.set_swap_module_params_on_conversion(True)
    torch.manual_seed(0)
    device = pick_device()
    model = nn.Sequential(WNLinear(4, 16), nn.Tanh(), WNLinear(16, 1)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randn(64, 4, device=device)
    y = torch.sin(x[:, :1]) + x[:, 1:2] ** 2

    model.to(torch.float64)  # swapped in place: the optimizer built above still holds them
    x, y = x.double(), y.double()
    for step in range(9):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()  # bug[norm-through-data]: grad-lost
        if step % 2 == 0:
            print(f"step {step}: loss {loss.item():.5f} dtype {model[0].v.dtype}")
    restored = pickle.loads(pickle.dumps(model))
    print("pickled model output matches:", torch.allclose(restored(x), model(x)))


if __name__ == "__main__":
    main()
