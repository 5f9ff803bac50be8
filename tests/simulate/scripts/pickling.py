"""Pickle round-trips of CUDA tensors, as multiprocessing queues and hand-written checkpoints
make them: a tensor that requires grad, a Parameter, views of one storage, a whole module."""

import io
import pickle

import torch
import torch.nn as nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
w = pickle.loads(pickle.dumps(torch.ones(2, device=device, requires_grad=True)))
assert w.device.type == device.type and w.requires_grad and w.is_leaf
(w * 2).sum().backward()
assert w.grad.tolist() == [2.0, 2.0]

base = torch.arange(6.0, device=device)
first, second = pickle.loads(pickle.dumps((base[:3], base[3:])))
first.add_(10)
assert first.device.type == second.device.type == device.type
assert first.tolist() == [10.0, 11.0, 12.0]

model = nn.Linear(2, 1).to(device)
copy = pickle.loads(pickle.dumps(model))
assert isinstance(copy.weight, nn.Parameter) and copy.weight.device.type == device.type
assert torch.equal(copy.weight.detach().cpu(), model.weight.detach().cpu())
loss = copy(torch.ones(3, 2, device=device)).sum()
loss.backward()
assert copy.weight.grad is not None and copy.weight.grad.device.type == device.type
# after training: autograd and PyTorch's size caches have been at the tensors
optimizer = torch.optim.SGD(copy.parameters(), lr=0.1)
for _ in range(2):
    optimizer.zero_grad()
    copy(torch.randn(3, 2, device=device)).pow(2).mean().backward()
    optimizer.step()
buffer = io.BytesIO()
torch.save(copy, buffer)
again = pickle.loads(pickle.dumps(copy))
assert again.weight.device.type == device.type
copy.cpu()
pickle.loads(pickle.dumps(copy))
torch.save(copy, io.BytesIO())
print("OK")
