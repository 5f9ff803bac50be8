"""Moving tensors and modules to CUDA, and code that branches on where a tensor is."""

import torch
import torch.nn as nn

device = "cuda" if torch.cuda.is_available() else "cpu"
a = torch.ones(3).cuda()
b = torch.ones(3).to("cuda", non_blocking=True)
c = torch.zeros(3, device=device)
d = torch.randn(2, 3, device=torch.device("cuda:0"))
e = torch.arange(3).to(torch.device(device))
for t in (a, b, c, d, e):
    assert t.is_cuda and t.device.type == "cuda" and str(t.device) == "cuda:0", t.device
    assert not t.is_cpu
model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)).cuda()
assert all(p.is_cuda for p in model.parameters())
other = nn.Linear(3, 1).to(device)
assert next(other.parameters()).device == torch.device("cuda", 0)
out = model(d)
if out.device.type == "cuda":  # the CUDA branch is the one taken
    out = out.float()
else:
    raise SystemExit("took the CPU branch")
host = out.detach().cpu()  # one copy, not at every step: not reported
assert host.device.type == "cpu" and not host.is_cuda
assert "device='cuda:0'" in repr(a)
try:
    a.numpy()
except TypeError as error:
    assert "cuda:0" in str(error)
else:
    raise SystemExit("numpy() of a CUDA tensor should refuse")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
history = []
for _step in range(3):
    optimizer.zero_grad()
    pred = model(d)
    pred.square().mean().backward()
    optimizer.step()
    history.append(pred.detach().cpu())  # expect: leaves-device
assert all(h.device.type == "cpu" for h in history)
print("OK")
