"""In-place ops that backward() survives: none is reported, and the script runs to the end.

Each write below is to a tensor no live autograd node saved (or saved ones are already freed,
or autograd is off), on the tensor type named by ``sys.argv[1]`` (see ``kinds.py``).
"""

import torch
import torch.nn.functional as F
from kinds import device, kind
from torch import nn

torch.manual_seed(0)

model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2)).to(device())
ema = [p.detach().clone() for p in model.parameters()]
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

# training: optimizer updates and an EMA of the weights, in place under no_grad
for _ in range(3):
    x = kind(torch.randn(4, 6))
    loss = model(x).pow(2).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        for e, p in zip(ema, model.parameters()):
            e.mul_(0.9).add_(p, alpha=0.1)

# a .data alias shares the memory but not the version counter: backward() does not fail
# (the weights are at version 3 after the optimizer's steps, their .data aliases at 0)
loss = model(kind(torch.randn(4, 6))).sum()
for p in model.parameters():
    p.data.clamp_(-1, 1)
loss.backward()

# an input that its consumer did not save (add saves nothing)
a = model(kind(torch.randn(4, 6)))
y = a + 1
a.add_(1)
y.sum().backward()

# mul by a number saves no tensor of its result: writing to the product is fine
h = model(kind(torch.randn(4, 6)))
out = F.relu(h)
out2 = out * 2
out2 += 1
out2.sum().backward()

# the ResNet order torchvision uses: the shortcut is added before the ReLU (batch norm's
# backward saves its input, not its output)
conv = nn.Conv2d(3, 3, 3, padding=1).to(device())
bn = nn.BatchNorm2d(3).to(device())
img = kind(torch.randn(2, 3, 5, 5))
out = bn(conv(img))
out += img
out = F.relu(out)
out.sum().backward()

# the VAE reparameterisation on a copy of std
mu, logvar = model(kind(torch.randn(4, 6))).chunk(2, dim=1)
std = torch.exp(0.5 * logvar)
eps = torch.randn_like(std)
z = std.clone().mul_(eps).add_(mu)
z.pow(2).sum().backward()

# after backward() freed the graph, its saved tensors may be written
s = torch.sigmoid(model(kind(torch.randn(4, 6))))
loss = (s * 3).sum()
loss.backward()
s.add_(1)

# a VQ-VAE's EMA codebook, written under no_grad while the distances to it (which saved it)
# are alive: they feed only argmin, no backward() goes through them
codebook = nn.Embedding(8, 2).to(device())
codebook.weight.requires_grad_(False)
flat = model(kind(torch.randn(4, 6)))
distances = (flat**2).sum(1, keepdim=True) - 2 * flat @ codebook.weight.t()
codes = distances.argmin(1)
quantized = codebook(codes)
with torch.no_grad():
    codebook.weight.copy_(0.99 * codebook.weight + 0.01 * flat.mean(0))
commitment = F.mse_loss(flat, quantized)
commitment.backward()

# operators that make new tensors, though their names begin as augmented assignments' do:
# `~pad` (__invert__) of the padding mask masked_fill saved, as attention pooling writes it
scores = model(kind(torch.randn(4, 6)))
pad = kind(torch.tensor([[False, True]] * 4))
masked = scores.masked_fill(pad, 0.0)
keep = ~pad
(masked * keep).sum().backward()

# inference: eval() under no_grad, and inference_mode
model.eval()
with torch.no_grad():
    pred = model(kind(torch.randn(4, 6)))
    pred.relu_()
    pred += 1
with torch.inference_mode():
    pred = model(kind(torch.randn(4, 6)))
    pred.sigmoid_()
    pred.mul_(2)
print("done")
