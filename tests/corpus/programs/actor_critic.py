"""Advantage actor-critic, modelled on pytorch/examples ``reinforcement_learning/actor_critic.py``
(a shared body with an action head and a value head, discounted returns normalised per episode,
policy loss ``-log_prob * advantage`` and a smooth-L1 value loss), vectorised over the episode,
with an entropy bonus, on a small synthetic corridor environment.

Bug variants (first argument):
- ``advantage-broadcast``: the critic's ``(T, 1)`` values subtracted from the ``(T,)`` returns
  without ``squeeze(-1)``: the advantage is ``(T, T)``.
- ``entropy-log-probs``: the entropy bonus written as ``-(probs * torch.log(probs))`` on a
  low-temperature softmax whose small probabilities underflow to 0 (``log(0) = -inf``).
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""
GAMMA, EPS, TEMPERATURE, N_ACTIONS = 0.99, 1e-6, 0.002, 5


class Corridor:
    """Walk right to reach the goal at position 8; actions move -2..+2."""

    def reset(self, generator):
        self.pos, self.t = int(torch.randint(0, 4, (1,), generator=generator)), 0
        return self.state()

    def state(self):
        return torch.tensor([self.pos / 8.0, self.t / 20.0, 1.0])

    def step(self, action: int):
        self.pos = max(0, self.pos + action - 2)
        self.t += 1
        done = self.pos >= 8 or self.t >= 20
        return self.state(), (1.0 if self.pos >= 8 else -0.05), done


class Policy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.affine1 = nn.Linear(3, 64)
        self.action_head = nn.Linear(64, N_ACTIONS)
        self.value_head = nn.Linear(64, 1)

    def forward(self, x):
        x = F.relu(self.affine1(x))
        return self.action_head(x) / TEMPERATURE, self.value_head(x)


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    generator = torch.Generator().manual_seed(1)
    env, model = Corridor(), Policy().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

    for episode in range(6):
        state, rewards, log_probs, values, entropies = env.reset(generator), [], [], [], []
        done = False
        while not done:
            logits, value = model(state.to(device))
            m = Categorical(logits=logits)
            action = m.sample()
            if BUG == "entropy-log-probs":
                probs = F.softmax(logits, dim=-1)
                log_p = torch.log(probs)  # bug[entropy-log-probs]: nan-inf
                entropies.append(-(probs * log_p).sum())
            else:
                entropies.append(m.entropy())
            state, reward, done = env.step(action.item())
            log_probs.append(m.log_prob(action))
            values.append(value)
            rewards.append(reward)
        R, returns = 0.0, []
        for r in reversed(rewards):
            R = r + GAMMA * R
            returns.insert(0, R)
        returns = torch.tensor(returns, device=device)
        returns = (returns - returns.mean()) / (returns.std(unbiased=False) + EPS)
        values = torch.stack(values)  # (T, 1)
        if BUG == "advantage-broadcast":
            advantage = returns - values  # bug[advantage-broadcast]: broadcast
        else:
            advantage = returns - values.squeeze(-1)
        policy_loss = -(torch.stack(log_probs) * advantage.detach()).mean()
        value_loss = F.smooth_l1_loss(values.squeeze(-1), returns)
        loss = policy_loss + value_loss - 0.01 * torch.stack(entropies).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"episode {episode}: length {len(rewards)} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
