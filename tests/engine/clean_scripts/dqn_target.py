"""Clean: a DQN update with a target network; the checker must report nothing.

The TD target is computed under `torch.no_grad()` from the target network, Q-values of the taken
actions are picked with `gather(1, a.unsqueeze(1)).squeeze(1)`, and both sides have shape
(batch,), so nothing broadcasts. Actions are chosen with `.argmax().item()`.
"""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from tensor_dap.testing import pick_device

device = pick_device()
torch.manual_seed(0)

state_dim, n_actions, batch, gamma = 6, 4, 32, 0.99
net = nn.Sequential(nn.Linear(state_dim, 32), nn.ReLU(), nn.Linear(32, n_actions)).to(device)
target_net = copy.deepcopy(net)
optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)

# A replay buffer kept on the host, as most implementations do; batches go to the device.
buffer_s = torch.randn(256, state_dim)
buffer_a = torch.randint(0, n_actions, (256,))
buffer_r = torch.randn(256)
buffer_s2 = torch.randn(256, state_dim)
buffer_done = (torch.rand(256) < 0.1).float()

for step in range(20):
    idx = torch.randint(0, 256, (batch,))
    s = buffer_s[idx].to(device)
    a = buffer_a[idx].to(device)
    r = buffer_r[idx].to(device)
    s2 = buffer_s2[idx].to(device)
    done = buffer_done[idx].to(device)

    with torch.no_grad():
        target = r + gamma * target_net(s2).max(1).values * (1.0 - done)
    q = net(s).gather(1, a.unsqueeze(1)).squeeze(1)
    loss = F.smooth_l1_loss(q, target)

    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

    if step % 5 == 4:
        target_net.load_state_dict(net.state_dict())
        with torch.no_grad():
            action = net(s[:1]).argmax().item()
        print(f"step {step}: loss {loss.item():.4f} greedy action {action}")
