"""A device picked the way PyTorch's tutorials pick it now, ``torch.accelerator``, and its
housekeeping: answered as on a machine with one CUDA device."""

import torch
from torch import nn

device = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"
print(f"Using {device} device")
assert device == "cuda", device
assert torch.accelerator.device_count() == 1
assert torch.accelerator.current_device_index() == 0
torch.accelerator.set_device_index(0)
with torch.accelerator.device_index(0):
    x = torch.randn(64, 16, device=device)
assert x.is_cuda
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # asks the current stream at step()
before = torch.accelerator.memory_allocated()
for _ in range(3):
    optimizer.zero_grad()
    model(x).pow(2).mean().backward()
    optimizer.step()
torch.accelerator.synchronize()
assert torch.accelerator.memory_allocated() > before  # Adam's state
assert torch.accelerator.max_memory_allocated() >= torch.accelerator.memory_allocated()
assert not torch.accelerator.current_stream().is_capturing()
torch.accelerator.empty_cache()
print("OK")
