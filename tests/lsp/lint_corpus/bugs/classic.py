"""The first five lints' bugs, the way training scripts write them."""

import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def run_epoch(model, loader, optimizer, criterion):
    running_loss = torch.zeros(1)  # expect: cpu-accumulator
    correct = torch.tensor(0.0)  # expect: cpu-accumulator
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
        optimizer.step()
        running_loss += loss.detach()
        correct = correct + (out.argmax(1) == y).sum()
    return running_loss, correct


def sum_losses(batches, model):
    total = torch.Tensor([0.0])  # expect: cpu-accumulator
    for x in batches:
        total += model(x.to(device)).mean().detach()
    return total


def fit(model, loader, optimizer, criterion, epochs):
    for _ in range(epochs):
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()  # expect: missing-zero-grad


def fit_amp(model, loader, optimizer, scaler, criterion):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)  # expect: missing-zero-grad
        scaler.update()


def fit_while(model, batches, opt):
    step = 0
    while step < len(batches):
        model(batches[step]).sum().backward()
        opt.step()  # expect: missing-zero-grad
        step += 1


def clipped_step(model, x, y, optimizer, criterion):
    optimizer.zero_grad()
    out = model(x)
    loss = criterion(out, y)
    for p in model.parameters():
        p.data.clamp_(-0.1, 0.1)  # expect: data-write
    model.head.weight.data.mul_(0.5)  # expect: data-write
    model.head.bias.data = model.head.bias.data * 0  # expect: data-write
    loss.backward()
    optimizer.step()


def fit_by_hand(x, y, lr=0.01):
    w = torch.randn(3, 1, requires_grad=True)
    b = torch.zeros(1).requires_grad_()
    scale = torch.ones(1, requires_grad=True)
    for _ in range(100):
        loss = ((x @ w * scale + b - y) ** 2).mean()
        loss.backward()
        w = w - lr * w.grad  # expect: leaf-rebound
        b = b - lr * b.grad  # expect: leaf-rebound
        scale = scale * 0.99 + 0.01  # expect: leaf-rebound
    return w, b


def load_for_inference(model, path, args):
    model.load_state_dict(torch.load(path, weights_only=True))  # expect: load-without-map-location
    state = torch.load(args.checkpoint, weights_only=True)  # expect: load-without-map-location
    model.load_state_dict(state["model"])
    extra = torch.load("extra.pt", weights_only=True)  # expect: load-without-map-location
    return extra
