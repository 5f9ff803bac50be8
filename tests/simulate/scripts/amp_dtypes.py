"""autocast("cuda") lowers precision as on a GPU: matmuls in float16 (or bfloat16), softmax and
losses in float32, concatenations at the widest input; gradients in the parameters' dtype."""

import torch
import torch.nn as nn
import torch.nn.functional as F

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(64, 5)).to(device)
images = torch.randn(2, 3, 6, 6, device=device)
labels = torch.tensor([0, 3], device=device)
with torch.autocast("cuda", dtype=torch.float16):
    logits = model(images)
    scores = logits @ logits.t()
    probabilities = F.softmax(logits, dim=1)
    loss = F.cross_entropy(logits, labels)
    both = torch.cat([images.flatten(1)[:, :5], logits])
assert logits.dtype == scores.dtype == torch.float16, (logits.dtype, scores.dtype)
assert probabilities.dtype == loss.dtype == both.dtype == torch.float32
loss.backward()
assert model[0].weight.grad.dtype == torch.float32
with torch.autocast("cuda", dtype=torch.bfloat16):
    assert model(images).dtype == torch.bfloat16
with torch.autocast("cuda", enabled=False):
    assert model(images).dtype == torch.float32
assert model(images).dtype == torch.float32
print("OK")
