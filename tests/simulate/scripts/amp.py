"""A clean mixed-precision training loop: autocast("cuda") and GradScaler."""

import torch
import torch.nn as nn

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
for scaler in (torch.amp.GradScaler("cuda"), torch.cuda.amp.GradScaler()):
    total = 0.0
    for _step in range(5):
        x = torch.randn(32, 8, device=device)
        y = torch.randint(0, 2, (32,), device=device)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        total += loss.item()
    assert total == total  # finite
print("OK")
