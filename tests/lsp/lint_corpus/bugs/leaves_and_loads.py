"""requires_grad tensors moved after they were made, and torch.load without weights_only."""

import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

w = torch.randn(784, 10, requires_grad=True).to(device)  # expect: requires-grad-non-leaf
b = torch.zeros(10, requires_grad=True).cuda()  # expect: requires-grad-non-leaf
scale = torch.ones(1, requires_grad=True).double()  # expect: requires-grad-non-leaf
optimizer = torch.optim.SGD([w, b, scale], lr=0.1)


def restore(net, p):
    net.load_state_dict(torch.load(p, map_location=device))  # expect: load-without-weights-only
    checkpoint = torch.load(p, map_location=device)  # expect: load-without-weights-only
    optimizer.load_state_dict(checkpoint["optimizer"])


def load_full(path):
    model = torch.load(path, map_location="cpu")  # expect: load-without-weights-only
    model.eval()
    return model


def load_best(save_path):
    with open(save_path, "rb") as f:
        best_model = torch.load(f)  # expect: load-without-weights-only, load-without-map-location
    return best_model
