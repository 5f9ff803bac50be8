"""Moving modules as GPU programs do: the Parameter objects stay the module's, as on CUDA.

nanoGPT ties its token embedding to the output head, an optimizer is often built before
``model.to(device)``, and ``model.cpu()`` at the end exports the weights; on a GPU each of
these keeps the same Parameter objects (PyTorch sets their data in place)."""

import copy

import torch
from torch import nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(16, 8)
        self.rnn = nn.LSTM(8, 8, batch_first=True)
        self.lm_head = nn.Linear(8, 16, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying


model = TinyLM()
held = model.lm_head.weight
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)  # built before the move
model.to(device)
assert model.wte.weight is model.lm_head.weight is held
assert len(list(model.parameters())) == 5 and held.device.type == device.type
idx = torch.randint(0, 16, (2, 5), device=device)
before = held.detach().clone()
for _ in range(2):
    optimizer.zero_grad()
    hidden, _ = model.rnn(model.wte(idx))
    logits = model.lm_head(hidden)
    nn.functional.cross_entropy(logits.reshape(-1, 16), idx.reshape(-1)).backward()
    optimizer.step()
assert not torch.equal(before, held.detach()), "the optimizer did not train the model"
model.half()
assert model.wte.weight is held and held.dtype == torch.float16
exported = model.cpu()
assert exported.lm_head.weight is held is exported.wte.weight and held.device.type == "cpu"
assert held.grad is not None and held.grad.device.type == "cpu"

# the old nn.utils.weight_norm / spectral_norm keep the weight they compute (a graph holding
# weight_g, weight_v, weight_orig) as a plain attribute while the module moves
normed = nn.Sequential(
    nn.utils.spectral_norm(nn.Linear(4, 3)), nn.ReLU(), nn.utils.weight_norm(nn.Linear(3, 2))
)
normed.to(device)
ema = copy.deepcopy(normed[0])  # BigGAN: G_ema right after the move (spectral_norm: a leaf)
out = normed(torch.randn(5, 4, device=device))
out.pow(2).mean().backward()
assert out.device.type == device.type and normed[2].weight_g.grad is not None
normed.cpu()

# flags set on parameters (Megatron's sequence_parallel, an optimizer's grouping) move with them
tagged = nn.Linear(3, 2)
tagged.bias.no_decay = True
tagged.to(device)
assert tagged.bias.no_decay and isinstance(tagged.bias, nn.Parameter)
assert tagged.bias.device.type == device.type
tagged.cpu()
assert tagged.bias.no_decay

# lazy modules moved before their first forward are made where they were moved to
lazy = nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.LazyLinear(3), nn.LazyBatchNorm1d())
lazy.to(device)
lazy_optimizer = torch.optim.SGD(lazy.parameters(), lr=0.1)
out = lazy(torch.randn(4, 5, device=device))
assert out.shape == (4, 3) and lazy[0].weight.device.type == device.type
assert lazy[3].running_mean.device.type == device.type
assert isinstance(lazy[2].weight, nn.Parameter) and not nn.parameter.is_lazy(lazy[2].weight)
out.sum().backward()
lazy_optimizer.step()
assert lazy[0].weight.grad is not None and lazy[0].weight.grad.device.type == device.type
back = nn.LazyLinear(2).to(device, torch.float64).cpu()
assert back(torch.randn(3, 4, dtype=torch.float64)).device.type == "cpu"
print("OK")
