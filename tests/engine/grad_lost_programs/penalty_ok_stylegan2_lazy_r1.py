"""StyleGAN2-style training loop (rosinality/stylegan2-pytorch train.py) with lazy R1 + non-saturating loss, tiny MLPs."""

import torch
from torch import autograd, nn, optim
from torch.nn import functional as F

torch.manual_seed(0)


class Args:
    iter = 40
    batch = 16
    r1 = 10.0
    d_reg_every = 4
    lr = 0.002
    latent = 16


args = Args()


def requires_grad(model, flag=True):
    for p in model.parameters():
        p.requires_grad = flag


def d_logistic_loss(real_pred, fake_pred):
    real_loss = F.softplus(-real_pred)
    fake_loss = F.softplus(fake_pred)
    return real_loss.mean() + fake_loss.mean()


def d_r1_loss(real_pred, real_img):
    (grad_real,) = autograd.grad(outputs=real_pred.sum(), inputs=real_img, create_graph=True)
    grad_penalty = grad_real.pow(2).reshape(grad_real.shape[0], -1).sum(1).mean()
    return grad_penalty


def g_nonsaturating_loss(fake_pred):
    return F.softplus(-fake_pred).mean()


generator = nn.Sequential(
    nn.Linear(args.latent, 64), nn.LeakyReLU(0.2), nn.Linear(64, 3 * 4 * 4), nn.Tanh()
)
discriminator = nn.Sequential(
    nn.Flatten(), nn.Linear(3 * 4 * 4, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1)
)

d_reg_ratio = args.d_reg_every / (args.d_reg_every + 1)
g_optim = optim.Adam(generator.parameters(), lr=args.lr, betas=(0.0, 0.99))
d_optim = optim.Adam(
    discriminator.parameters(), lr=args.lr * d_reg_ratio, betas=(0**d_reg_ratio, 0.99**d_reg_ratio)
)

loss_dict = {}
r1_loss = torch.tensor(0.0)
for idx in range(args.iter):
    i = idx
    real_img = torch.randn(args.batch, 3, 4, 4).clamp(-1, 1)

    requires_grad(generator, False)
    requires_grad(discriminator, True)
    noise = torch.randn(args.batch, args.latent)
    fake_img = generator(noise).view(args.batch, 3, 4, 4)
    fake_pred = discriminator(fake_img)
    real_pred = discriminator(real_img)
    d_loss = d_logistic_loss(real_pred, fake_pred)

    loss_dict["d"] = d_loss
    loss_dict["real_score"] = real_pred.mean()
    loss_dict["fake_score"] = fake_pred.mean()

    discriminator.zero_grad()
    d_loss.backward()
    d_optim.step()

    d_regularize = i % args.d_reg_every == 0
    if d_regularize:
        real_img.requires_grad = True
        real_pred = discriminator(real_img)
        r1_loss = d_r1_loss(real_pred, real_img)

        discriminator.zero_grad()
        (args.r1 / 2 * r1_loss * args.d_reg_every + 0 * real_pred[0]).backward()
        d_optim.step()

    loss_dict["r1"] = r1_loss

    requires_grad(generator, True)
    requires_grad(discriminator, False)
    noise = torch.randn(args.batch, args.latent)
    fake_img = generator(noise).view(args.batch, 3, 4, 4)
    fake_pred = discriminator(fake_img)
    g_loss = g_nonsaturating_loss(fake_pred)
    loss_dict["g"] = g_loss

    generator.zero_grad()
    g_loss.backward()
    g_optim.step()

    loss_reduced = {k: v.mean().item() for k, v in loss_dict.items()}
    if i % 5 == 0:
        print(
            f"d: {loss_reduced['d']:.4f}; g: {loss_reduced['g']:.4f}; r1: {loss_reduced['r1']:.4f}; "
            f"real_score: {loss_reduced['real_score']:.4f}; fake_score: {loss_reduced['fake_score']:.4f}"
        )
