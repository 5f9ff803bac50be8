"""A variational autoencoder, modelled on pytorch/examples ``vae`` (``encode``/``reparameterize``/
``decode``, ``loss_function`` = BCE + KLD, ``train_loss += loss.item()``), on synthetic binary
images.

Bug variants (first argument):
- ``inplace-reparam``: ``std.mul_(eps).add_(mu)`` (old code written to save memory) modifies
  the ``exp`` output autograd saved; PyTorch raises at ``backward()``.
- ``recon-numpy``: the reconstructions are copied to NumPy every step to track a pixel error.
- ``mean-loss-graph``: the progress line's running mean of the loss is updated with the loss
  tensor, ``avg_loss += (loss - avg_loss) / (step + 1)``, not ``loss.item()``: it keeps
  every batch's graph.
"""

import sys

import torch
import torch.nn.functional as F
from torch import nn

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""


class VAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc21 = nn.Linear(32, 4)
        self.fc22 = nn.Linear(32, 4)
        self.fc3 = nn.Linear(4, 32)
        self.fc4 = nn.Linear(32, 64)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        if BUG == "inplace-reparam":
            return std.mul_(eps).add_(mu)  # bug[inplace-reparam]: inplace-saved
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 64))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 64), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    prototypes = (torch.rand(4, 64) > 0.5).float()
    data = prototypes[torch.randint(0, 4, (96,))]
    data = torch.where(torch.rand_like(data) < 0.05, 1 - data, data).view(-1, 1, 8, 8)
    model = VAE().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    for epoch in range(1, 4):
        model.train()
        train_loss, avg_loss, pixel_errors = 0.0, 0.0, []
        for step, i in enumerate(range(0, len(data), 32)):
            batch = data[i : i + 32].to(device)
            optimizer.zero_grad()
            recon_batch, mu, logvar = model(batch)
            loss = loss_function(recon_batch, batch, mu, logvar)
            loss.backward()
            train_loss += loss.item()
            if BUG == "mean-loss-graph":
                avg_loss += (loss - avg_loss) / (step + 1)  # bug[mean-loss-graph]: graph-kept
            else:
                avg_loss += (loss.item() - avg_loss) / (step + 1)
            optimizer.step()
            if BUG == "recon-numpy":
                recon = recon_batch.detach().cpu().numpy()  # bug[recon-numpy]: leaves-device
                pixel_errors.append(float(abs(recon.round() - recon.round()).mean()))
        print(f"====> Epoch: {epoch} Average loss: {train_loss / len(data):.4f}")
        print(f"      batch mean: {float(avg_loss):.4f}")


if __name__ == "__main__":
    main()
