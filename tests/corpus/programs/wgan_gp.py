"""A WGAN-GP, modelled on eriklindernoren/PyTorch-GAN ``wgan_gp``: an MLP generator and critic,
Adam with betas (0.5, 0.999), the critic trained every batch and the generator every
``N_CRITIC`` batches, and the gradient penalty of the critic's gradients at points between real
and fake samples, made with ``torch.autograd.grad(..., create_graph=True)`` so that the critic's
``backward()`` goes through it.

Bug variants (first argument):
- ``penalty-item``: ``compute_gradient_penalty`` returns ``gradient_penalty.item()`` (a number
  for the log line, one might think): ``d_loss`` then adds a constant and the critic is never
  penalised.
"""

import sys

import torch
import torch.nn as nn

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""
LATENT_DIM, DATA_DIM, LAMBDA_GP, N_CRITIC = 8, 16, 10, 5


class Generator(nn.Module):
    def __init__(self) -> None:
        super().__init__()

        def block(in_feat: int, out_feat: int, normalize: bool = True) -> list[nn.Module]:
            layers: list[nn.Module] = [nn.Linear(in_feat, out_feat)]
            if normalize:
                layers.append(nn.BatchNorm1d(out_feat, 0.8))
            layers.append(nn.LeakyReLU(0.2, inplace=True))
            return layers

        self.model = nn.Sequential(
            *block(LATENT_DIM, 32, normalize=False),
            *block(32, 64),
            nn.Linear(64, DATA_DIM),
            nn.Tanh(),
        )

    def forward(self, z):
        return self.model(z)


class Discriminator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(DATA_DIM, 64),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(64, 32),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(32, 1),
        )

    def forward(self, x):
        return self.model(x)


def compute_gradient_penalty(D, real_samples, fake_samples):
    """Calculates the gradient penalty loss for WGAN GP"""
    alpha = torch.rand(real_samples.size(0), 1, device=real_samples.device)
    interpolates = (alpha * real_samples + ((1 - alpha) * fake_samples)).requires_grad_(True)
    d_interpolates = D(interpolates)
    fake = torch.ones(real_samples.shape[0], 1, device=real_samples.device)
    gradients = torch.autograd.grad(
        outputs=d_interpolates,
        inputs=interpolates,
        grad_outputs=fake,
        create_graph=True,
        retain_graph=True,
        only_inputs=True,
    )[0]
    gradients = gradients.view(gradients.size(0), -1)
    gradient_penalty = ((gradients.norm(2, dim=1) - 1) ** 2).mean()
    if BUG == "penalty-item":
        return gradient_penalty.item()  # bug[penalty-item]: grad-lost
    return gradient_penalty


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    dataset = torch.tanh(torch.randn(256, DATA_DIM).cumsum(dim=-1) / 4)
    generator, discriminator = Generator().to(device), Discriminator().to(device)
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))

    batches_done = 0
    for epoch in range(2):
        for i in range(0, len(dataset), 32):
            real_imgs = dataset[i : i + 32].to(device)
            # ---------------------
            #  Train Discriminator
            # ---------------------
            optimizer_D.zero_grad()
            z = torch.randn(real_imgs.shape[0], LATENT_DIM, device=device)
            fake_imgs = generator(z)
            real_validity = discriminator(real_imgs)
            fake_validity = discriminator(fake_imgs.detach())
            gradient_penalty = compute_gradient_penalty(
                discriminator, real_imgs, fake_imgs.detach()
            )
            d_loss = (
                -torch.mean(real_validity)
                + torch.mean(fake_validity)
                + LAMBDA_GP * gradient_penalty
            )
            d_loss.backward()
            optimizer_D.step()
            optimizer_G.zero_grad()
            # Train the generator every n_critic steps
            if i // 32 % N_CRITIC == 0:
                fake_imgs = generator(z)
                fake_validity = discriminator(fake_imgs)
                g_loss = -torch.mean(fake_validity)
                g_loss.backward()
                optimizer_G.step()
                batches_done += N_CRITIC
        print(f"[Epoch {epoch}/2] [D loss: {d_loss.item():.4f}] [G loss: {g_loss.item():.4f}]")


if __name__ == "__main__":
    main()
