"""eval() without train() in the training loop, and evaluation loops that keep the graph."""

import torch


def fit(model, train_loader, val_loader, optimizer, criterion, epochs):
    model.train()
    for _epoch in range(epochs):
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
        model.eval()  # expect: eval-without-train
        with torch.no_grad():
            correct = sum((model(x).argmax(1) == y).sum().item() for x, y in val_loader)
        print(correct)


def fit_steps(model, loader, optimizer, criterion, evaluate):
    for step, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
        if step % 500 == 0:
            model.train(False)  # expect: eval-without-train
            evaluate(model)


def fit_gan_critic(critic, loader, optimizer):
    for real in loader:
        critic.eval()  # expect: eval-without-train
        optimizer.zero_grad()
        loss = -critic(real).mean()
        loss.backward()
        optimizer.step()


def validate(model, val_loader, criterion):
    model.eval()
    total = 0.0
    for x, y in val_loader:
        total += criterion(model(x), y).item()  # expect: eval-without-no-grad
    return total / len(val_loader)


def predict(net, batches):
    net.eval()
    predictions = []
    i = 0
    while i < len(batches):
        predictions.append(net(batches[i]).argmax(dim=1))  # expect: eval-without-no-grad
        i += 1
    return predictions


def evaluate(model, test_loader, device):
    model.eval()
    correct = 0
    for data, target in test_loader:
        data, target = data.to(device), target.to(device)
        output = model(data)  # expect: eval-without-no-grad
        correct += (output.argmax(1) == target).sum().item()
    return correct
