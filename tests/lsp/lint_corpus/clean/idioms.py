"""Datasets with their own `data`, init functions, manual SGD under no_grad, leaves made on
their device, checkpoints loaded with weights_only, closures, and eval loops done right."""

import copy

import torch
import torch.nn as nn
from torch.utils.data import Dataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class TextDataset(Dataset):
    def __init__(self, path, tokenizer):
        self.data = []
        with open(path) as f:
            for line in f:
                self.data.append(tokenizer(line))
        self.targets = [len(x) for x in self.data]

    def subset(self, n):
        self.data = self.data[:n]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self.data[index], self.targets[index]


class GPTBlock(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.proj = nn.Linear(n_embd, n_embd)
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(mean=0.0, std=0.02)  # hint: data-write
            if module.bias is not None:
                module.bias.data.zero_()  # hint: data-write


def manual_sgd(x, y, lr=0.1, steps=100):
    w = torch.randn(3, 1, requires_grad=True, device=device)
    b = torch.zeros(1, requires_grad=True, device=device)
    for _ in range(steps):
        loss = ((x @ w + b - y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            w -= lr * w.grad
            b -= lr * b.grad
            w.grad.zero_()
            b.grad.zero_()
    return w, b


class Affine(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1, requires_grad=True).to(device))


def check_gradients(model):
    probe = torch.rand(2, 3, requires_grad=True).cuda()  # hint: requires-grad-non-leaf
    model(probe).sum().backward()
    return [p.grad for p in model.parameters()]


def flatten_parameters(params, flat):
    offset = 0
    for p in params:
        p.data = flat[offset : offset + p.numel()].view_as(p)  # hint: data-write
        offset += p.numel()


def lbfgs(model, x, y, criterion):
    optimizer = torch.optim.LBFGS(model.parameters())

    def closure():
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        return loss

    for _ in range(10):
        optimizer.step(closure)


def resume(model, optimizer, path):
    checkpoint = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    return checkpoint["epoch"]


def accuracy(model, loader):
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    model.train()
    return correct


def saliency(model, images):
    model.eval()
    maps = []
    for image in images:
        image = image.clone().requires_grad_()
        model(image).max().backward()
        maps.append(image.grad.abs())
    return maps


def fit_with_toggle(model, loader, val_loader, optimizer, criterion, epochs):
    for _epoch in range(epochs):
        model.train()
        running_loss = 0.0
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
        print(accuracy(model, val_loader), running_loss)


def gradient_accumulation(model, loader, optimizer, criterion, k=4):
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / k
        loss.backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()


def validation_losses_kept_for_early_stopping(model, x_val, y_val, criterion, epochs):
    model.eval()
    val_losses = []
    for _epoch in range(epochs):
        with torch.no_grad():
            val_loss = criterion(model(x_val), y_val)
        val_losses.append(val_loss)  # made under no_grad: no graph kept
        if len(val_losses) > 3 and val_losses[-1] > min(val_losses[:-1]):
            break
    return val_losses


def optimizers_made_again_on_purpose(model, loader, tasks, meta, lrs):
    """An optimizer per epoch (a learning rate each), SGD without momentum (no state), a new
    model per trial, MAML's copies: each optimizer made in a loop for a reason."""
    for lr in lrs:
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    for x, y in loader:
        sgd = torch.optim.SGD(model.parameters(), lr=0.1)
        sgd.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        sgd.step()
    for hidden in (16, 32, 64):
        trial = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Linear(hidden, 1))
        trial_opt = torch.optim.Adam(trial.parameters())
        trial_opt.zero_grad()
        trial(x).sum().backward()
        trial_opt.step()
    for task in tasks:
        learner = copy.deepcopy(meta)
        inner = torch.optim.SGD(learner.parameters(), lr=0.01, momentum=0.9)
        inner.zero_grad()
        learner(task).sum().backward()
        inner.step()


def penalties_kept_tensors(D, G, model, real, z, x, x_col, d_opt, opt, LAMBDA_GP=10):
    """create_graph=True penalties kept tensors in the loss and logged with .item() / float()
    (before or after the backward, summed with +=), and an adaptive weight read with .item()
    on purpose (it weights a tensor; a PINN's residual term)."""
    fake = G(z).detach()
    alpha = torch.rand(real.size(0), 1)
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    scores = D(mixed)
    grads = torch.autograd.grad(scores, mixed, torch.ones_like(scores), create_graph=True)[0]
    gp = ((grads.norm(2, dim=1) - 1) ** 2).mean()
    gp_logged = gp.item()
    d_loss = D(fake).mean() - D(real).mean() + LAMBDA_GP * gp
    d_opt.zero_grad()
    d_loss.backward()
    d_opt.step()
    running_gp = 0.0
    running_gp += float(gp)
    print(f"gp {gp.item():.3f} {gp_logged:.3f} {running_gp:.3f}")
    u = model(x_col)
    du = torch.autograd.grad(u, x_col, torch.ones_like(u), create_graph=True)[0]
    d2u = torch.autograd.grad(du, x_col, torch.ones_like(du), create_graph=True)[0]
    loss_r = (d2u + u).pow(2).mean()
    loss_b = model(x).pow(2).mean()
    lam = loss_r.item() / (loss_b.item() + 1e-8)
    weight = loss_r.item()
    loss = loss_r + lam * loss_b + weight * loss_b
    opt.zero_grad()
    loss.backward()
    opt.step()
    return {"loss": loss.item(), "residual": loss_r.item()}
