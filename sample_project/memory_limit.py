# tensor-dap: memory-limit=8MiB
"""Embeddings of a whole dataset collected on the device: memory grows with every batch.

`features.append(encoder(x))` keeps each batch's output on the device, so the list holds the
whole dataset's embeddings there: fine on a small test set, out of memory on the real one.
With a memory limit (`tensor-dap check --memory-limit 8MiB`, or `"tensorMemoryLimit"` in the
launch) tensor-dap stops at the line whose op takes the device past it, naming the lines that
made the memory. The fix: `.cpu()` each batch's output, or reduce it as you go.
"""

import torch
import torch.nn as nn

# a GPU when there is one (on a laptop: tensor-dap check --simulate cuda)
use_cuda = torch.cuda.is_available()
device = torch.device("cuda" if use_cuda else "cpu")
torch.manual_seed(0)

encoder = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1024)).to(device).eval()
batches = [torch.randn(256, 64, device=device) for _ in range(12)]

features = []
with torch.no_grad():
    for x in batches:
        features.append(encoder(x))  # expect: memory-limit

print(f"{len(features)} batches of {features[0].shape[1]} features")
