"""A DataLoader's `collate_fn` builds a batch's targets as `(B,)` next to `(B, 1)` features.

It runs in the DataLoader's worker processes (`num_workers=2`), where `features - targets`
silently broadcasts to `(B, B)`: each worker reports it, labelled `worker 0` / `worker 1`.
`--start-method spawn` starts the workers with spawn instead of the platform default (fork).
"""

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset


def collate(batch: list) -> tuple:
    features = torch.stack([f for f, _ in batch])  # (B, 1)
    targets = torch.stack([t for _, t in batch])  # (B,)
    residual = features - targets  # expect[worker]: broadcast
    return features, targets, residual


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--start-method", default=None, choices=["fork", "spawn"])
    options = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(32, 1), torch.randn(32))
    loader = DataLoader(
        data,
        batch_size=8,
        num_workers=2,
        collate_fn=collate,
        multiprocessing_context=options.start_method,
    )
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    residual = None
    for features, targets, residual in loader:  # noqa: B007 - the last batch's is printed
        optimizer.zero_grad()
        loss = ((model(features).squeeze(1) - targets) ** 2).mean()
        loss.backward()
        optimizer.step()
    print(f"loss {loss.item():.4f} residual {tuple(residual.shape)}")


if __name__ == "__main__":
    main()
