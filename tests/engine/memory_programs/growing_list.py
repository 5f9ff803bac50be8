"""Batch outputs kept in a list: live tensor memory grows by 1 MiB a step."""

import torch

weights = [torch.zeros(256, 1024) for _ in range(2)]
outputs = []
for step in range(10):
    outputs.append(torch.ones(256, 1024) * step)
print("kept", len(outputs))
