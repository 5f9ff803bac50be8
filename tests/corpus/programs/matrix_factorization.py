"""A matrix-factorization recommender (biased SVD, "Funk SVD") trained on explicit ratings, the
way blog posts and research code write it with raw tensors: user and item factor matrices and
biases made with ``torch.randn(...) * 0.1`` and ``.requires_grad_()``, ``torch.optim.Adam`` over
the list of them, shuffled minibatches of ``(user, item, rating)`` triples, MSE plus an L2 term
on the factors the batch touched, a held-out RMSE under ``torch.no_grad()``; synthetic low-rank
ratings.

Bug variants (first argument):
- ``moved-after-optimizer``: the factors are made on the CPU, the optimizer is given them, and
  only then are they moved, ``P, Q = P.to(device), Q.to(device)``: the names now hold copies on
  the device, ``optimizer.step()`` updates the CPU originals, the copies never change (the
  gradients flow back through them, so nothing raises): the RMSE stays where it started.
- ``bias-broadcast``: the dot product summed with ``keepdim=True``: ``(B, 1)`` plus the ``(B,)``
  biases is a ``(B, B)`` prediction, and the loss averages every user's score for every item of
  the batch against each rating.
"""

import sys

import torch

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""
N_USERS, N_ITEMS, RANK = 60, 50, 8


def synthetic_ratings(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` (user, item, rating) triples of a rank-4 taste model plus noise, ratings 1..5."""
    users = torch.randint(0, N_USERS, (n,))
    items = torch.randint(0, N_ITEMS, (n,))
    taste, traits = torch.randn(N_USERS, 4), torch.randn(N_ITEMS, 4)
    score = (taste[users] * traits[items]).sum(1) / 2 + 3 + 0.3 * torch.randn(n)
    return users, items, score.clamp(1, 5)


def predict(P, Q, b_u, b_i, mu, u, i):
    if BUG == "bias-broadcast":
        dot = (P[u] * Q[i]).sum(1, keepdim=True)
        return dot + b_u[u] + b_i[i] + mu  # bug[bias-broadcast]: broadcast
    return (P[u] * Q[i]).sum(1) + b_u[u] + b_i[i] + mu


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    users, items, ratings = synthetic_ratings(2400)
    users, items, ratings = users.to(device), items.to(device), ratings.to(device)
    n_train = 2000
    mu = ratings[:n_train].mean()

    if BUG == "moved-after-optimizer":
        P = (torch.randn(N_USERS, RANK) * 0.1).requires_grad_()
        Q = (torch.randn(N_ITEMS, RANK) * 0.1).requires_grad_()
        b_u = torch.zeros(N_USERS, requires_grad=True)
        b_i = torch.zeros(N_ITEMS, requires_grad=True)
        optimizer = torch.optim.Adam([P, Q, b_u, b_i], lr=0.02)
        P, Q = P.to(device), Q.to(device)  # bug[moved-after-optimizer]: stale-copy
        b_u, b_i = b_u.to(device), b_i.to(device)  # bug[moved-after-optimizer]: stale-copy
    else:
        P = (torch.randn(N_USERS, RANK, device=device) * 0.1).requires_grad_()
        Q = (torch.randn(N_ITEMS, RANK, device=device) * 0.1).requires_grad_()
        b_u = torch.zeros(N_USERS, device=device, requires_grad=True)
        b_i = torch.zeros(N_ITEMS, device=device, requires_grad=True)
        optimizer = torch.optim.Adam([P, Q, b_u, b_i], lr=0.02)

    batch_size, weight_decay = 100, 0.02
    for epoch in range(6):
        perm = torch.randperm(n_train, device=device)
        total = 0.0
        for start in range(0, n_train, batch_size):
            idx = perm[start : start + batch_size]
            u, i, r = users[idx], items[idx], ratings[idx]
            pred = predict(P, Q, b_u, b_i, mu, u, i)
            mse = ((pred - r) ** 2).mean()
            reg = weight_decay * (P[u].pow(2).sum(1) + Q[i].pow(2).sum(1)).mean()
            loss = mse + reg
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += mse.item() * len(idx)
        with torch.no_grad():
            u, i, r = users[n_train:], items[n_train:], ratings[n_train:]
            rmse = ((predict(P, Q, b_u, b_i, mu, u, i) - r) ** 2).mean().sqrt()
        if epoch % 2 == 1:
            print(f"epoch {epoch + 1}: train mse {total / n_train:.4f} test rmse {rmse.item():.4f}")


if __name__ == "__main__":
    main()
