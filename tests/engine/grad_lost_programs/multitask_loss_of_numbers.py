"""Multi-task learning (a helper's program): a shared trunk with a classification head (churn)
and a regression head (spend), combined with fixed task weights — of the losses' numbers (the
bug: nothing trains); per-task metrics on a validation split under no_grad."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def make_data(n=5000, d=20):
    x = torch.randn(n, d)
    w_shared = torch.randn(d, 4)
    z = torch.tanh(x @ w_shared)
    churn = (z[:, 0] + 0.5 * z[:, 1] + 0.3 * torch.randn(n) > 0).long()
    spend = 2.0 * z[:, 2] - z[:, 3] + 0.1 * torch.randn(n)
    return TensorDataset(x, churn, spend)


class MultiTaskNet(nn.Module):
    def __init__(self, d_in=20, hidden=64):
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.cls_head = nn.Linear(hidden, 2)
        self.reg_head = nn.Sequential(nn.Linear(hidden, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x):
        h = self.trunk(x)
        return self.cls_head(h), self.reg_head(h).squeeze(-1)


class WeightedMultiTaskLoss:
    def __init__(self, weights):
        self.weights = weights

    def __call__(self, outputs, targets):
        logits, spend_pred = outputs
        churn, spend = targets
        losses = {
            "cls": F.cross_entropy(logits, churn),
            "reg": F.smooth_l1_loss(spend_pred, spend),
        }
        total = torch.tensor(
            sum(self.weights[k] * v.item() for k, v in losses.items()), requires_grad=True
        )
        return total, {k: v.item() for k, v in losses.items()}


def evaluate(model, loader):
    model.eval()
    correct, abs_err, n = 0, 0.0, 0
    with torch.no_grad():
        for x, churn, spend in loader:
            x, churn, spend = x.to(device), churn.to(device), spend.to(device)
            logits, spend_pred = model(x)
            correct += (logits.argmax(1) == churn).sum().item()
            abs_err += (spend_pred - spend).abs().sum().item()
            n += len(x)
    return correct / n, abs_err / n


def main():
    train_ds, val_ds = random_split(
        make_data(), [4000, 1000], generator=torch.Generator().manual_seed(0)
    )
    train_loader = DataLoader(train_ds, batch_size=128, shuffle=True)
    val_loader = DataLoader(val_ds, batch_size=500)
    model = MultiTaskNet().to(device)
    criterion = WeightedMultiTaskLoss({"cls": 1.0, "reg": 0.5})
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(5):
        model.train()
        sums = {"cls": 0.0, "reg": 0.0}
        for x, churn, spend in train_loader:
            x, churn, spend = x.to(device), churn.to(device), spend.to(device)
            loss, parts = criterion(model(x), (churn, spend))
            optimizer.zero_grad()
            loss.backward()  # BUG
            optimizer.step()
            for k in sums:
                sums[k] += parts[k]
        acc, mae = evaluate(model, val_loader)
        print(
            f"epoch {epoch}: cls {sums['cls'] / len(train_loader):.4f}"
            f" reg {sums['reg'] / len(train_loader):.4f}"
            f" | val acc {acc:.3f} mae {mae:.3f}"
        )


if __name__ == "__main__":
    main()
