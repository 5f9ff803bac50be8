"""More ways to make CUDA tensors: generators, the default device, a small CNN."""

import torch
import torch.nn as nn

device = "cuda" if torch.cuda.is_available() else "cpu"
made = [
    torch.tensor([1, 2], device=device),
    torch.ones(2).cuda(0),
    torch.randn(2, generator=torch.Generator(device=device).manual_seed(1), device=device),
    torch.ones(2, device=device).new_zeros(3),
    torch.zeros_like(torch.ones(2, device=device)),
]
torch.set_default_device(device)
made.append(torch.ones(2))
assert torch.get_default_device() == made[-1].device
torch.set_default_device(None)
# activations kept on the host for backward, in pinned memory (a GPU run's memory saver)
weight = torch.randn(3, 3, device=device, requires_grad=True)
with torch.autograd.graph.save_on_cpu(pin_memory=True):
    (weight * weight).sum().backward()
assert weight.grad.device.type == torch.device(device).type
cnn = nn.Sequential(
    nn.Conv2d(1, 8, 3),
    nn.BatchNorm2d(8),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Flatten(),
    nn.Linear(8 * 13 * 13, 10),
).to(device)
made.append(cnn(torch.randn(4, 1, 28, 28, device=device)))
assert all(t.is_cuda and str(t.device) == "cuda:0" for t in made), [t.device for t in made]
# a CPU scalar filled from a device scalar: read as a number, legal on CUDA
best = torch.tensor(0.0)
best.fill_(made[-1].max().detach())
print("OK")
