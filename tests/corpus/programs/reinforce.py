"""REINFORCE, modelled on pytorch/examples ``reinforcement_learning/reinforce.py``
(``policy.saved_log_probs``, ``policy.rewards``, ``finish_episode`` with normalised returns and
``policy_loss = torch.cat(policy_loss).sum()``), on a synthetic sparse-reward task: a sequence
of guesses where only a correct final guess pays.

Bug variants (first argument):
- ``std-no-eps``: the returns are normalised by ``returns.std()`` without ``eps``; an episode
  with no reward has all-zero returns and ``0 / 0`` is NaN.
- ``detached-log-probs``: ``m.log_prob(action).detach()`` stored (to "save memory"), so
  ``torch.cat(policy_loss)`` has no history.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""
GAMMA = 0.99
EPS = torch.finfo(torch.float32).eps


class Policy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.affine1 = nn.Linear(4, 32)
        self.dropout = nn.Dropout(p=0.2)
        self.affine2 = nn.Linear(32, 3)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = F.relu(self.dropout(self.affine1(x)))
        return F.softmax(self.affine2(x), dim=1)


def select_action(policy, state, device):
    state = state.unsqueeze(0).to(device)
    probs = policy(state)
    m = Categorical(probs)
    action = m.sample()
    if BUG == "detached-log-probs":
        policy.saved_log_probs.append(m.log_prob(action).detach())
    else:
        policy.saved_log_probs.append(m.log_prob(action))
    return action.item()


def finish_episode(policy, optimizer, device):
    R, policy_loss, returns = 0.0, [], []
    for r in policy.rewards[::-1]:
        R = r + GAMMA * R
        returns.insert(0, R)
    returns = torch.tensor(returns, device=device)
    if BUG == "std-no-eps":
        returns = (returns - returns.mean()) / returns.std()  # bug[std-no-eps]: nan-inf
    else:
        returns = (returns - returns.mean()) / (returns.std() + EPS)
    for log_prob, R in zip(policy.saved_log_probs, returns):
        policy_loss.append(-log_prob * R)
    optimizer.zero_grad()
    policy_loss = torch.cat(policy_loss).sum()
    policy_loss.backward()  # bug[detached-log-probs]: grad-lost
    optimizer.step()
    del policy.rewards[:]
    del policy.saved_log_probs[:]
    return policy_loss.item()


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    policy = Policy().to(device)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    targets = torch.randint(0, 3, (8,))

    for i_episode in range(8):
        target = int(targets[i_episode])
        for t in range(5):
            state = torch.tensor([t / 5.0, 1.0, float(target == 0), 0.5])
            action = select_action(policy, state, device)
            policy.rewards.append(1.0 if t == 4 and action == target else 0.0)
        total = sum(policy.rewards)
        loss = finish_episode(policy, optimizer, device)
        print(f"episode {i_episode}: reward {total:.1f} loss {loss:.4f}")


if __name__ == "__main__":
    main()
