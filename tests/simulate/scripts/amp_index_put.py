"""Embeddings written into a float32 buffer under autocast: on a GPU the model's float16 output
does not fit ("Index put requires the source and destination dtypes match")."""

import torch
import torch.nn as nn

device = "cuda" if torch.cuda.is_available() else "cpu"
encoder = nn.Linear(16, 8).to(device)
batches = [torch.randn(4, 16, device=device) for _ in range(3)]
embeddings = torch.zeros(12, 8, device=device)
with torch.no_grad(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    for number, batch in enumerate(batches):
        rows = torch.arange(4 * number, 4 * number + 4, device=device)
        embeddings[rows] = encoder(batch)  # BUG
print("OK")
