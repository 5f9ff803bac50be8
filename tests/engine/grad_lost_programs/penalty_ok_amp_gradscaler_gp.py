"""Gradient penalty with GradScaler, following the PyTorch AMP examples ("Gradient penalty" recipe), on CPU/bfloat16."""

import torch
import torch.nn as nn

torch.manual_seed(0)
device = "cpu"
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.MSELoss()
scaler = torch.amp.GradScaler(device, init_scale=2.0**8)

data = [(torch.randn(32, 16), torch.randn(32, 1)) for _ in range(30)]

for epoch in range(1):
    for step, (input, target) in enumerate(data):
        optimizer.zero_grad()
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            output = model(input)
            loss = loss_fn(output.float(), target)

        # Scales the loss for autograd.grad's backward pass, producing scaled_grad_params
        scaled_grad_params = torch.autograd.grad(
            outputs=scaler.scale(loss), inputs=model.parameters(), create_graph=True
        )

        # Creates unscaled grad_params before computing the penalty. scaled_grad_params are
        # not owned by any optimizer, so ordinary division is used instead of scaler.unscale_:
        inv_scale = 1.0 / scaler.get_scale()
        grad_params = [p * inv_scale for p in scaled_grad_params]

        # Computes the penalty term and adds it to the loss
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            grad_norm = 0
            for grad in grad_params:
                grad_norm += grad.pow(2).sum()
            grad_norm = grad_norm.sqrt()
            loss = loss + grad_norm

        # Applies scaling to the backward call as usual.
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

        if step % 5 == 0:
            print(
                f"step {step}: loss={loss.item():.4f} grad_norm={grad_norm.item():.4f} scale={scaler.get_scale():.1f}"
            )
