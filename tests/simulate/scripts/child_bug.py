"""Started by spawns.py: a CPU accumulator meeting a CUDA tensor."""

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
weights = torch.ones(3, device=device)
total = torch.zeros(3)
total = total + weights  # BUG
