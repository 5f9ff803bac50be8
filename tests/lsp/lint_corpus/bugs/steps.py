"""zero_grad() between backward() and step(), and losses kept with their graphs."""

import torch


def train(model, loader, optimizer, criterion):
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.zero_grad()  # expect: zero-grad-before-step
        optimizer.step()


def train_amp(model, loader, optimizer, scaler, criterion):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        model.zero_grad()  # expect: zero-grad-before-step
        scaler.step(optimizer)
        scaler.update()


def train_epoch(model, loader, opt, criterion):
    total = 0.0
    losses = []
    for x, y in loader:
        opt.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        opt.step()
        total += loss  # expect: loss-accumulated-with-graph
        losses.append(loss)  # expect: loss-accumulated-with-graph
    return total / len(loader), losses


def hf_epoch(model, dataloader, optimizer):
    running = 0
    for batch in dataloader:
        outputs = model(**batch)
        outputs.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        running = running + outputs.loss  # expect: loss-accumulated-with-graph
    return running


def train_closure(model, loader, optimizer, criterion):
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.zero_grad(set_to_none=True)  # expect: zero-grad-before-step
        if loss.item() < 10:
            optimizer.step()
