"""Two optimizers (GAN style) zeroing in place with set_to_none=False: every step follows a
zero_grad of its own parameters, so missing-zero-grad must stay silent."""

import torch

from tensor_dap.testing import pick_device

device = pick_device()
torch.manual_seed(0)
generator = torch.nn.Linear(3, 3).to(device)
critic = torch.nn.Linear(3, 1).to(device)
opt_g = torch.optim.SGD(generator.parameters(), lr=0.1)
opt_c = torch.optim.SGD(critic.parameters(), lr=0.1)
for _step in range(3):
    opt_g.zero_grad(set_to_none=False)
    opt_c.zero_grad(set_to_none=False)
    critic(torch.randn(4, 3, device=device)).sum().backward()
    generator(torch.randn(4, 3, device=device)).sum().backward()
    torch.nn.utils.clip_grad_norm_(generator.parameters(), 1.0)
    opt_c.step()
    opt_g.step()
print("done")
