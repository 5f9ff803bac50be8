"""Gradient penalties made with create_graph=True and turned into numbers before the loss."""

import torch
import torch.nn.functional as F
from torch import autograd

LAMBDA_GP = 10


def compute_gradient_penalty(D, real_samples, fake_samples):
    alpha = torch.rand(real_samples.size(0), 1, device=real_samples.device)
    interpolates = (alpha * real_samples + ((1 - alpha) * fake_samples)).requires_grad_(True)
    d_interpolates = D(interpolates)
    gradients = torch.autograd.grad(
        outputs=d_interpolates,
        inputs=interpolates,
        grad_outputs=torch.ones_like(d_interpolates),
        create_graph=True,
        retain_graph=True,
    )[0]
    gradients = gradients.view(gradients.size(0), -1)
    gradient_penalty = ((gradients.norm(2, dim=1) - 1) ** 2).mean()
    return gradient_penalty.item()  # expect: penalty-as-number


def d_step(discriminator, real_img, fake_img, d_optim, r1_gamma=10.0):
    real_img.requires_grad = True
    real_pred = discriminator(real_img)
    (grad_real,) = autograd.grad(outputs=real_pred.sum(), inputs=real_img, create_graph=True)
    r1 = float(grad_real.pow(2).flatten(1).sum(1).mean())  # expect: penalty-as-number
    d_loss = F.softplus(-real_pred).mean() + F.softplus(discriminator(fake_img)).mean()
    d_loss = d_loss + r1_gamma / 2 * r1
    d_optim.zero_grad()
    d_loss.backward()
    d_optim.step()


def double_backprop(model, optimizer, x, y):
    x.requires_grad_(True)
    loss = F.cross_entropy(model(x), y)
    (gx,) = torch.autograd.grad(loss, x, create_graph=True)
    total = loss + 0.01 * gx.pow(2).sum().item()  # expect: penalty-as-number
    optimizer.zero_grad()
    total.backward()
    optimizer.step()


def amp_penalty(model, optimizer, scaler, inputs, targets):
    with torch.autocast(device_type="cuda", dtype=torch.float16):
        loss = F.mse_loss(model(inputs), targets)
    scaled_grad_params = torch.autograd.grad(
        outputs=scaler.scale(loss), inputs=model.parameters(), create_graph=True
    )
    inv_scale = 1.0 / scaler.get_scale()
    grad_params = [p * inv_scale for p in scaled_grad_params]
    with torch.autocast(device_type="cuda", dtype=torch.float16):
        grad_norm = 0
        for grad in grad_params:
            grad_norm += grad.pow(2).sum()
        grad_norm = grad_norm.sqrt().item()  # expect: penalty-as-number
        loss = loss + grad_norm
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
