"""pytorch/examples' reinforcement_learning/actor_critic.py with a toy episodic environment,
written by a helper (helper 65), and one bug: the action's log-probability is saved as a Python
number (`.item()`) and re-made with `torch.tensor` for the policy loss, so the actor's head never
gets a gradient. The critic's `value.item()` for the advantage is right: the finding must name
the `.item()` that cut the actor's head, not that one."""

from collections import namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

SavedAction = namedtuple("SavedAction", ["log_prob", "value"])
gamma = 0.99
eps = np.finfo(np.float32).eps.item()
torch.manual_seed(543)


class Corridor:
    def __init__(self, seed):
        self.rng = np.random.RandomState(seed)

    def reset(self):
        self.pos, self.t = 0, 0
        return np.array([self.pos / 5.0, 1.0, self.rng.rand()], dtype=np.float32), {}

    def step(self, a):
        self.pos = max(-5, min(5, self.pos + (1 if a == 1 else -1)))
        self.t += 1
        reward = 1.0 if self.pos == 5 else 0.0
        terminated = self.pos == 5
        truncated = self.t >= 30
        return (
            np.array([self.pos / 5.0, 1.0, self.rng.rand()], dtype=np.float32),
            reward,
            terminated,
            truncated,
            {},
        )


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(3, 64)
        self.action_head = nn.Linear(64, 2)
        self.value_head = nn.Linear(64, 1)
        self.saved_actions = []
        self.rewards = []

    def forward(self, x):
        x = F.relu(self.affine1(x))
        action_prob = F.softmax(self.action_head(x), dim=-1)
        state_values = self.value_head(x)
        return action_prob, state_values


model = Policy()
optimizer = optim.Adam(model.parameters(), lr=3e-2)


def select_action(state):
    state = torch.from_numpy(state).float()
    probs, state_value = model(state)
    m = Categorical(probs)
    action = m.sample()
    model.saved_actions.append(SavedAction(m.log_prob(action).item(), state_value))  # BUG
    return action.item()


def finish_episode():
    R = 0
    saved_actions = model.saved_actions
    policy_losses = []
    value_losses = []
    returns = []
    for r in model.rewards[::-1]:
        R = r + gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    for (log_prob, value), R in zip(saved_actions, returns):
        advantage = R - value.item()
        policy_losses.append(-torch.tensor(log_prob) * advantage)
        value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))
    optimizer.zero_grad()
    loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()
    loss.backward()
    optimizer.step()
    del model.rewards[:]
    del model.saved_actions[:]
    return loss.item()


def main():
    env = Corridor(543)
    running_reward = 0
    for i_episode in range(1, 13):
        state, _ = env.reset()
        ep_reward = 0
        for t in range(1, 10000):
            action = select_action(state)
            state, reward, terminated, truncated, _ = env.step(action)
            model.rewards.append(reward)
            ep_reward += reward
            if terminated or truncated:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        loss = finish_episode()
        if i_episode % 4 == 0:
            print(
                f"Episode {i_episode}\tLast length: {t:5d}\tAverage reward: {running_reward:.4f}\tloss {loss:.4f}"
            )


if __name__ == "__main__":
    main()
