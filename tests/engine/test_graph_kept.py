"""``graph-kept``: every way a loss is kept with its graph across iterations is reported at the
accumulating line; every idiom that accumulates correctly, or keeps a graph on purpose, is not.

Each program below is a function; a line ending in ``# kept`` is where the finding must be.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.agent import mode
from tensor_dap.testing import accelerator_device
from tests.engine.test_memory_stops import LAST_EVALUATION, _line

DEVICE = torch.device("cpu")


def _setup(device: torch.device = DEVICE) -> tuple[nn.Module, torch.optim.Optimizer, list]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [(torch.randn(8, 6, device=device), torch.randn(8, 1, device=device))] * 6
    return model, optimizer, batches


def train_total_inplace(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    total_loss = 0.0
    for x, y in batches:
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        total_loss += loss  # kept


def train_total_rebound_before_backward(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    running = torch.zeros(1, device=device)
    for x, y in batches:
        loss = F.mse_loss(model(x), y)
        running = running + loss  # kept
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def eval_without_no_grad(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)

    def evaluate() -> float:
        val_loss = 0
        for x, y in batches:
            val_loss += F.mse_loss(model(x), y)  # kept
        return val_loss.item()

    for _ in range(2):
        for x, y in batches[:3]:
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
        evaluate()


def losses_appended(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss)  # kept
    print(torch.stack(losses).mean().item())


def losses_in_a_dict_of_lists(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    history: dict[str, list[torch.Tensor]] = {"loss": []}
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        history["loss"].append(loss)  # kept
    print(torch.stack(history["loss"]).mean().item())


def _record(store: list, value: torch.Tensor) -> None:
    store.append(value)


def validation_loss_weighted_by_batch_size(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    model.eval()
    val_loss = 0.0
    for x, y in batches:
        val_loss += F.mse_loss(model(x), y) * len(x)  # kept
    print(val_loss / 48)


def losses_appended_by_a_helper(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    losses: list[torch.Tensor] = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        _record(losses, loss)  # kept
    print(torch.stack(losses).mean().item())


def losses_in_a_dict_handed_to_a_helper(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    history: dict[str, list[torch.Tensor]] = {"loss": []}
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        _record(history["loss"], loss)  # kept


def validation_losses_in_a_defaultdict(device: torch.device) -> None:
    """An evaluation loop without torch.no_grad() logging into ``defaultdict(list)``: each
    batch's graph and activations stay as long as the history."""
    import collections

    model, optimizer, batches = _setup(device)
    history: collections.defaultdict = collections.defaultdict(list)
    for _epoch in range(2):
        _train_epoch(model, optimizer, batches[:3])
        model.eval()
        for x, y in batches:
            loss = F.mse_loss(model(x), y)
            history["val_loss"].append(loss)  # kept
        print(torch.stack(history["val_loss"]).mean().item())


def validation_losses_by_setdefault(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    history: dict[str, list[torch.Tensor]] = {}
    key = "val_loss"
    for _epoch in range(2):
        _train_epoch(model, optimizer, batches[:3])
        model.eval()
        for x, y in batches:
            history.setdefault(key, []).append(F.mse_loss(model(x), y))  # kept
        print(torch.stack(history[key]).mean().item())


def losses_kept_by_setdefault(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    history: dict[str, list[torch.Tensor]] = {}
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        history.setdefault("loss", []).append(loss)  # kept
    print(torch.stack(history["loss"]).mean().item())


def losses_kept_by_a_trainer_log_method(device: torch.device) -> None:
    """A hand-written trainer whose ``log`` keeps what it is given under its name."""

    class Trainer:
        def __init__(self) -> None:
            self.model, self.optimizer, self.batches = _setup(device)
            self.logged: dict[str, list[torch.Tensor]] = {}

        def log(self, name: str, value: torch.Tensor) -> None:
            self.logged.setdefault(name, []).append(value)

        def fit(self) -> None:
            for x, y in self.batches:
                self.optimizer.zero_grad()
                loss = F.mse_loss(self.model(x), y)
                loss.backward()
                self.optimizer.step()
                self.log("train_loss", loss)  # kept
            print(torch.stack(self.logged["train_loss"]).mean().item())

    Trainer().fit()


_HISTORY: dict = {}


def _log(key: str, value: torch.Tensor) -> None:
    _HISTORY.setdefault(key, [])
    _HISTORY[key].append(value)


def losses_logged_by_a_module_function(device: torch.device) -> None:
    """A module-level ``log(key, value)`` appending to a global history, read back each
    epoch by ``torch.stack`` (a read, not the line keeping them)."""
    model, optimizer, batches = _setup(device)
    _HISTORY.clear()
    for _epoch in range(2):
        for x, y in batches:
            loss = _trained_loss(model, optimizer, x, y)
            _log("loss", loss)  # kept
        print(torch.stack(_HISTORY["loss"][-len(batches) :]).mean().item())
    _HISTORY.clear()


class _Tracker:
    """A metric tracker as training scripts write them."""

    def __init__(self) -> None:
        self.values: list[torch.Tensor] = []

    def update(self, value: torch.Tensor) -> None:
        self.values.append(value)

    def average(self) -> float:
        return torch.stack(self.values).mean().item()


def losses_kept_by_a_tracker(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    tracker = _Tracker()
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        tracker.update(loss)  # kept
    print(tracker.average())


class _KeyedTracker:
    """``MetricTracker("loss", "acc")``: one list per metric in a dict."""

    def __init__(self, *keys: str) -> None:
        self._data: dict[str, list[torch.Tensor]] = {key: [] for key in keys}

    def update(self, key: str, value: torch.Tensor) -> None:
        self._data[key].append(value)


def losses_kept_by_a_keyed_tracker(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    tracker = _KeyedTracker("loss", "error")
    for x, y in batches:
        optimizer.zero_grad()
        out = model(x)
        loss = F.mse_loss(out, y)
        loss.backward()
        optimizer.step()
        tracker.update("error", (out - y).abs().mean().detach())
        tracker.update("loss", loss)  # kept


def _train_epoch(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> None:
    for x, y in batches:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()


def final_eval_in_eval_mode(device: torch.device) -> None:
    """The program's last evaluation: no backward() follows it."""
    model, optimizer, batches = _setup(device)
    _train_epoch(model, optimizer, batches)
    model.eval()
    val_loss = 0.0
    for x, y in batches:
        val_loss += F.mse_loss(model(x), y)  # kept
    print(f"validation loss {val_loss.item() / len(batches):.3f}")


def evaluate_function_in_eval_mode(device: torch.device) -> None:
    model, _, batches = _setup(device)

    def evaluate(net: nn.Module, loader: list) -> float:
        net.eval()
        total = torch.zeros((), device=device)
        for x, y in loader:
            total = total + F.mse_loss(net(x), y)  # kept
        net.train()
        return total.item() / len(loader)

    evaluate(model, batches)


def lightning_style_validation(device: torch.device) -> None:
    class Regressor(nn.Module):
        """A Lightning-style module: its own validation loop, ``self`` the model."""

        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))

        def validate(self, batches: list) -> float:
            self.eval()
            self.val_sum = 0
            for x, y in batches:
                self.val_sum = self.val_sum + F.mse_loss(self.net(x), y)  # kept
            return self.val_sum.item() / len(batches)

    _, _, batches = _setup(device)
    Regressor().to(device).validate(batches)


def final_eval_in_train_mode(device: torch.device) -> None:
    """The program's last evaluation with the model left in training mode: no backward()
    follows it, and nothing says it is an evaluation until its total goes unused."""
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()

    def test_loss() -> float:
        total = 0
        for x, y in batches:
            total += F.mse_loss(model(x), y)  # kept
        return total.item() / len(batches)

    print(f"test loss {test_loss():.3f}")


def inference_without_no_grad(device: torch.device) -> None:
    """A scoring script: no optimizer, no backward(), parameters requiring grad."""
    model, _, batches = _setup(device)
    for _ in range(2):
        score = torch.zeros((), device=device)
        for x, y in batches:
            score = score + F.l1_loss(model(x), y)  # kept
        print(f"mean error {score.item() / len(batches):.3f}")


def validation_losses_appended_in_train_mode(device: torch.device) -> None:
    """Validation losses kept in a list for their mean, the model in training mode, no
    torch.no_grad(): every batch's graph and activations stay until the list goes."""
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()

    def validate() -> float:
        losses = []
        for x, y in batches:
            losses.append(F.mse_loss(model(x), y))  # kept
        return torch.stack(losses).mean().item()

    print(f"validation loss {validate():.3f}")


def train_total_of_a_scaled_backward(device: torch.device) -> None:
    """The backward starts from a tensor made of the loss, not from the loss itself."""
    model, optimizer, batches = _setup(device)
    scaler = torch.amp.GradScaler(device.type)
    total_loss = 0.0
    for step, (x, y) in enumerate(batches):
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        if step % 3 == 0:
            (loss * 0.5).backward()
        elif step % 3 == 1:
            (loss + 1e-4 * model[0].weight.pow(2).sum()).backward()
        else:
            scaler.scale(loss).backward()
        optimizer.step()
        total_loss += loss  # kept


class _Agent(nn.Module):
    """An actor-critic agent as PPO implementations write it (CleanRL's shape)."""

    def __init__(self) -> None:
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
        self.actor = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))

    def get_action_and_value(self, obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        dist = torch.distributions.Categorical(logits=self.actor(obs))
        action = dist.sample()
        return action, dist.log_prob(action), self.critic(obs).squeeze(-1)


def rollout_kept_without_no_grad(device: torch.device) -> None:
    """A PPO rollout collected without torch.no_grad(): every step's log-probabilities and
    values (one per environment) keep their graphs in the rollout lists; the update recomputes
    them, so no backward() ever goes through what the lists hold."""
    torch.manual_seed(0)
    agent = _Agent().to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
    for _update in range(3):
        observations, actions, log_probs, values = [], [], [], []
        obs = torch.randn(8, 4, device=device)
        for _step in range(6):
            action, log_prob, value = agent.get_action_and_value(obs)
            observations.append(obs)
            actions.append(action)
            log_probs.append(log_prob)  # kept
            values.append(value)  # kept
            obs = torch.randn(8, 4, device=device)
        old_log_probs = torch.stack(log_probs).detach().reshape(-1)
        batch = torch.stack(observations).reshape(-1, 4)
        taken = torch.stack(actions).reshape(-1)
        for _epoch in range(2):  # epochs of minibatches over the rollout
            for start in range(0, 48, 16):
                part = slice(start, start + 16)
                dist = torch.distributions.Categorical(logits=agent.actor(batch[part]))
                ratio = (dist.log_prob(taken[part]) - old_log_probs[part]).exp()
                optimizer.zero_grad()
                (-ratio.mean()).backward()
                optimizer.step()


class _Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.ReLU())
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def predictions_collected_without_no_grad(device: torch.device) -> None:
    """An evaluation collecting every batch's logits for its metrics, without
    torch.no_grad(): each batch's graph and activations stay as long as the list."""
    torch.manual_seed(0)
    model = _Classifier().to(device)
    batches = [torch.randn(8, 6, device=device) for _ in range(6)]

    def evaluate() -> float:
        model.eval()
        all_logits = []
        for x in batches:
            logits = model(x)
            all_logits.append(logits)  # kept
        return torch.cat(all_logits).argmax(1).float().mean().item()

    print(f"mean class {evaluate():.2f}")


def validation_outputs_after_long_training(device: torch.device) -> None:
    """timm's validate() without torch.no_grad(), after an epoch of training: the model's
    call sites ran hundreds of times, and model.eval() has them looked at afresh."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 32), nn.GELU(), nn.Dropout(0.1), nn.Linear(32, 3))
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 6, device=device), torch.randint(0, 3, (8,), device=device)
    for _ in range(3):
        model.train()
        for _step in range(120):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        model.eval()
        outputs = []
        for _batch in range(12):
            output = model(x)
            outputs.append(output)  # kept
        print(f"accuracy {(torch.cat(outputs).argmax(1) == y.repeat(12)).float().mean():.2f}")


class _TutorialNet(nn.Module):
    """The 60-minute blitz's shape: layers called in ``forward``, the output returned."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(6, 32), nn.Linear(32, 32), nn.Linear(32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def _trained_tutorial_net(device: torch.device) -> tuple[nn.Module, torch.Tensor]:
    """A :class:`_TutorialNet` after 100 training steps, and its batch."""
    torch.manual_seed(0)
    model = _TutorialNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 6, device=device), torch.randint(0, 3, (8,), device=device)
    for _step in range(100):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return model, x


def user_model_evaluated_without_no_grad_after_training(device: torch.device) -> None:
    """The output comes back from the user's own forward (`return self.fc3(x)`): the list is
    found in the loop that calls it, the sampled op being one of three linear layers."""
    model, x = _trained_tutorial_net(device)
    model.eval()
    all_logits = []
    for _batch in range(200):
        all_logits.append(model(x))  # kept
    print(f"predicted {torch.cat(all_logits).argmax(1).float().mean():.2f}")


def features_kept_by_a_forward_hook(device: torch.device) -> None:
    """Feature extraction with a forward hook, the model in eval mode without
    ``torch.no_grad()``: the hook's list keeps every batch's activations and their graph."""
    features = []

    def keep_features(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        features.append(output)  # kept

    _evaluate_with_a_hook(keep_features, features, device)


def features_by_layer_in_a_defaultdict(device: torch.device) -> None:
    """``features = defaultdict(list)``, one hook per layer appending under its name."""
    import collections

    features: collections.defaultdict = collections.defaultdict(list)

    def keep(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
            features[name].append(output)  # kept

        return hook

    torch.manual_seed(0)
    model = _TutorialNet().to(device)
    model.fc1.register_forward_hook(keep("fc1"))
    model.fc2.register_forward_hook(keep("fc2"))
    model.eval()
    x = torch.randn(8, 6, device=device)
    for _batch in range(40):
        model(x)
    print(f"{len(features['fc2'])} batches")


def _evaluate_with_a_hook(hook: Callable[..., None], features: list, device: torch.device) -> None:
    """40 batches through a model in eval mode, ``hook`` on its second layer filling
    ``features``, no ``torch.no_grad()``."""
    torch.manual_seed(0)
    model = _TutorialNet().to(device)
    model.fc2.register_forward_hook(hook)
    model.eval()
    x = torch.randn(8, 6, device=device)
    for _batch in range(40):
        model(x)
    print(f"mean feature {torch.cat(features).mean():.3f}")


def features_kept_by_a_hook_object_after_training(device: torch.device) -> None:
    """The hook object of feature-extraction write-ups registered on every linear layer after
    training, a validation pass in eval mode without ``torch.no_grad()``."""

    class SaveOutput:
        def __init__(self) -> None:
            self.outputs: list = []

        def __call__(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
            self.outputs.append(output)  # kept

    model, x = _trained_tutorial_net(device)
    save_output = SaveOutput()
    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            layer.register_forward_hook(save_output)
    model.eval()
    for _batch in range(60):
        model(x)
    print(f"{len(save_output.outputs)} activations")


def rollout_buffers_filled_without_no_grad(device: torch.device) -> None:
    """A hand-written PPO storing its rollout in preallocated tensors (CleanRL's layout) without
    torch.no_grad(): each write keeps that step's graph in the buffer, and the update detaches
    what it reads from them, so no backward() goes through what the buffers hold."""
    torch.manual_seed(0)
    agent = _Agent().to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
    for _update in range(3):
        obs_buf = torch.zeros(6, 8, 4, device=device)
        logprobs = torch.zeros(6, 8, device=device)
        values = torch.zeros(6, 8, device=device)
        obs = torch.randn(8, 4, device=device)
        for step in range(6):
            obs_buf[step] = obs
            _action, log_prob, value = agent.get_action_and_value(obs)
            logprobs[step] = log_prob  # kept
            values[step] = value  # kept
            obs = torch.randn(8, 4, device=device)
        returns = torch.randn(6, 8, device=device)
        advantages = returns - values.detach()
        old = logprobs.detach()
        for _epoch in range(2):
            dist = torch.distributions.Categorical(logits=agent.actor(obs_buf.reshape(-1, 4)))
            taken = torch.zeros(48, dtype=torch.long, device=device)
            ratio = (dist.log_prob(taken) - old.reshape(-1)).exp()
            optimizer.zero_grad()
            (-(ratio * advantages.reshape(-1)).mean()).backward()
            optimizer.step()


def losses_written_into_a_preallocated_tensor(device: torch.device) -> None:
    """A tensor of per-step losses for a plot: each entry keeps its step's graph."""
    model, optimizer, batches = _setup(device)
    history = torch.zeros(len(batches), device=device)
    for i, (x, y) in enumerate(batches):
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history[i] = loss  # kept


def ema_without_no_grad(device: torch.device) -> None:
    """An EMA of the weights by hand, its copy frozen, the update outside no_grad: each EMA
    tensor's chain grows by two nodes every step."""
    import copy

    model, optimizer, batches = _setup(device)
    ema = copy.deepcopy(model).requires_grad_(False)
    for x, y in batches:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        for p_ema, p in zip(ema.parameters(), model.parameters()):
            p_ema.mul_(0.99).add_(p, alpha=0.01)  # kept


def ema_remade_out_of_place_without_no_grad(device: torch.device) -> None:
    """An EMA kept in a dict of shadow tensors, remade out of place each step outside
    no_grad: each shadow tensor's chain grows every step."""

    class EMA:
        def __init__(self, model: nn.Module, decay: float = 0.99) -> None:
            self.decay = decay
            self.shadow = {n: p.detach().clone() for n, p in model.named_parameters()}

        def update(self, model: nn.Module) -> None:
            for n, p in model.named_parameters():
                self.shadow[n] = self.decay * self.shadow[n] + p * (1 - self.decay)  # kept

    model, optimizer, batches = _setup(device)
    ema = EMA(model)
    for batch in batches:
        _train_epoch(model, optimizer, [batch])
        ema.update(model)


def ema_of_shadows_cloned_with_their_history(device: torch.device) -> None:
    """A dict of shadows made by ``p.clone()`` (not detached: each starts with the parameter's
    history), remade out of place each step outside no_grad."""

    class EMA:
        def __init__(self, model: nn.Module, decay: float = 0.99) -> None:
            self.decay = decay
            self.shadow = {n: p.clone() for n, p in model.named_parameters()}

        def update(self, model: nn.Module) -> None:
            for n, param in model.named_parameters():
                self.shadow[n] = self.decay * self.shadow[n] + (1.0 - self.decay) * param  # kept

    model, optimizer, batches = _setup(device)
    ema = EMA(model)
    for batch in batches:
        _train_epoch(model, optimizer, [batch])
        ema.update(model)


def ema_in_place_of_shadows_cloned_with_their_history(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    shadow = [p.clone() for p in model.parameters()]
    for batch in batches:
        _train_epoch(model, optimizer, [batch])
        for s, p in zip(shadow, model.parameters()):
            s.mul_(0.99).add_((1.0 - 0.99) * p)  # kept


def ema_of_shadows_cloned_under_no_grad(device: torch.device) -> None:
    """Shadows cloned with their history, then updated under no_grad: nothing grows."""
    model, optimizer, batches = _setup(device)
    shadow = [p.clone() for p in model.parameters()]
    for batch in batches:
        _train_epoch(model, optimizer, [batch])
        with torch.no_grad():
            for i, p in enumerate(model.parameters()):
                shadow[i] = 0.99 * shadow[i] + 0.01 * p
            for s, p in zip(shadow, model.parameters()):
                s.mul_(0.99).add_(0.01 * p)


def ema_remade_by_lerp_without_no_grad(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    shadow = [p.detach().clone() for p in model.parameters()]
    for batch in batches:
        _train_epoch(model, optimizer, [batch])
        for i, p in enumerate(model.parameters()):
            shadow[i] = torch.lerp(shadow[i], p, 0.01)  # kept


def ema_remade_out_of_place_under_no_grad(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    shadow = [p.detach().clone() for p in model.parameters()]
    for batch in batches:
        _train_epoch(model, optimizer, [batch])
        with torch.no_grad():
            for i, p in enumerate(model.parameters()):
                shadow[i] = 0.99 * shadow[i] + 0.01 * p
        for i, p in enumerate(model.parameters()):
            shadow[i] = 0.99 * shadow[i] + 0.01 * p.detach()


def ema_of_parameters_cast_to_double(device: torch.device) -> None:
    """An EMA kept in double precision of a float model, remade out of place."""
    model, optimizer, batches = _setup(device)
    shadow = [p.detach().double() for p in model.parameters()]
    for batch in batches:
        _train_epoch(model, optimizer, [batch])
        for i, p in enumerate(model.parameters()):
            shadow[i] = 0.99 * shadow[i] + 0.01 * p.double()  # kept


def parameters_flattened_into_a_buffer_each_step(device: torch.device) -> None:
    """The parameters copied into one flat buffer each step (for their norm): a graph of this
    step's parameters, dropped within the step."""
    model, optimizer, batches = _setup(device)
    count = sum(p.numel() for p in model.parameters())
    for batch in batches:
        _train_epoch(model, optimizer, [batch])
        flat = torch.zeros(count, device=device)
        offset = 0
        for p in model.parameters():
            flat[offset : offset + p.numel()].copy_(p.view(-1))
            offset += p.numel()
        print(f"weight norm {flat.norm().item():.3f}")


def weights_mixed_with_a_constant_in_each_forward(device: torch.device) -> None:
    """A forward mixing a fixed tensor and a parameter (a learned interpolation): every
    step's graph is new, nothing chains across steps."""
    torch.manual_seed(0)
    weight = nn.Parameter(torch.randn(6, 1, device=device))
    prior = torch.randn(6, 1, device=device)
    optimizer = torch.optim.SGD([weight], lr=0.01)
    x, y = torch.randn(8, 6, device=device), torch.randn(8, 1, device=device)
    for _step in range(6):
        mixed = 0.5 * prior + 0.5 * weight
        optimizer.zero_grad()
        F.mse_loss(x @ mixed, y).backward()
        optimizer.step()


def swa_average_with_lerp_without_no_grad(device: torch.device) -> None:
    """A running average of the weights (SWA by hand) with ``lerp_``, outside no_grad."""
    model, optimizer, batches = _setup(device)
    averaged = [p.detach().clone() for p in model.parameters()]
    for n, (x, y) in enumerate(batches, start=1):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        for avg, p in zip(averaged, model.parameters()):
            avg.lerp_(p, 1 / n)  # kept


def validation_loss_appended_once_an_epoch(device: torch.device) -> None:
    """A validation loss computed once an epoch after ``model.eval()``, without no_grad, kept
    in a list for the learning curve: training steps run between two appends."""
    model, optimizer, batches = _setup(device)
    x_val, y_val = torch.randn(32, 6, device=device), torch.randn(32, 1, device=device)
    val_losses = []
    for _epoch in range(4):
        model.train()
        _train_epoch(model, optimizer, batches)
        model.eval()
        val_loss = F.mse_loss(model(x_val), y_val)
        val_losses.append(val_loss)  # kept


def ema_by_foreach_lerp_without_no_grad(device: torch.device) -> None:
    """timm's ModelEmaV3 update (``torch._foreach_lerp_`` over the parameter lists) with its
    ``@torch.no_grad()`` lost."""
    model, optimizer, batches = _setup(device)
    ema = [p.detach().clone() for p in model.parameters()]
    for x, y in batches:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        torch._foreach_lerp_(ema, list(model.parameters()), weight=0.01)  # kept


def ema_by_copy_and_running_average_without_no_grad(device: torch.device) -> None:
    """ModelEmaV2's ``copy_`` form, and an SWA running average by ``+=``, outside no_grad."""
    model, optimizer, batches = _setup(device)
    ema = [p.detach().clone() for p in model.parameters()]
    swa = [p.detach().clone() for p in model.parameters()]
    for n, (x, y) in enumerate(batches, start=1):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        for e, s, p in zip(ema, swa, model.parameters()):
            e.copy_(0.99 * e + 0.01 * p)  # kept
            s += (p - s) / (n + 1)  # kept


def eval_logits_written_into_slices(device: torch.device) -> None:
    """An evaluation after model.eval() writing each batch's predictions into a slice of a
    preallocated tensor, without no_grad."""
    model, _, batches = _setup(device)
    model.eval()
    predictions = torch.zeros(len(batches) * 8, 1, device=device)
    for i, (x, _y) in enumerate(batches):
        predictions[i * 8 : (i + 1) * 8] = model(x)  # kept


def eval_predictions_copied_into_slices(device: torch.device) -> None:
    """The same, each batch's predictions copied into a slice (``narrow(...).copy_``): each
    epoch's copies chain onto the last epoch's."""
    model, optimizer, batches = _setup(device)
    predictions = torch.zeros(len(batches) * 8, 1, device=device)
    for _epoch in range(2):
        _train_epoch(model, optimizer, batches[:3])
        model.eval()
        for i, (x, _y) in enumerate(batches):
            predictions.narrow(0, i * 8, 8).copy_(model(x))  # kept
        model.train()


def _trained_loss(
    model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """One training step; its loss, still carrying its graph."""
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def training_metrics_kept_in_lists(device: torch.device) -> None:
    """Metrics of each step's output kept as tensors for the epoch's means: each keeps the
    output alive with its graph (no backward() goes through the metric)."""
    import collections

    model, optimizer, batches = _setup(device)
    metric_fns = {"mse": F.mse_loss, "mae": F.l1_loss}
    for _epoch in range(2):
        metrics: collections.defaultdict = collections.defaultdict(list)
        for x, y in batches:
            out = model(x)
            optimizer.zero_grad()
            F.smooth_l1_loss(out, y).backward()
            optimizer.step()
            for name, fn in metric_fns.items():
                metrics[name].append(fn(out, y))  # kept
        print({name: torch.stack(values).mean().item() for name, values in metrics.items()})


def training_metric_computed_before_backward(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    for _epoch in range(2):
        maes = []
        for x, y in batches:
            out = model(x)
            loss = F.mse_loss(out, y)
            maes.append(F.l1_loss(out, y))  # kept
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(torch.stack(maes).mean().item())


def training_metrics_kept_as_numbers(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    maes, outputs = [], []
    for x, y in batches:
        out = model(x)
        loss = F.mse_loss(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        maes.append(F.l1_loss(out, y).item())
        outputs.append(out.detach())
    print(sum(maes) / len(maes), torch.cat(outputs).mean().item())


def losses_kept_by_a_trainer_with_odd_attributes(device: torch.device) -> None:
    """A trainer whose class has a config object answering any attribute (addict-style) and a
    dict of lists keyed by modules whose ``repr`` raises: looking for the list must run none
    of that code."""

    class Config:
        def __getattr__(self, name: str) -> Config:
            return Config()

    class Block(nn.Linear):
        def extra_repr(self) -> str:
            raise AttributeError("no scale")

    class Trainer:
        defaults = Config()

        def __init__(self) -> None:
            self.model, self.optimizer, self.batches = _setup(device)
            self.norms: dict = {Block(2, 2): [], Block(2, 2): []}
            self.history: list = []

        def log(self, name: str, value: float) -> None:
            self.history.append(value)

        def fit(self) -> None:
            for x, y in self.batches:
                loss = _trained_loss(self.model, self.optimizer, x, y)
                self.log("lr", 0.01)
                self.log("train_loss", loss)  # kept

    Trainer().fit()


def validation_losses_logged_by_a_trainer_method(device: torch.device) -> None:
    """A hand-written trainer's validation without no_grad: ``self.log("val_loss", loss)``
    keeps each batch's loss, with its graph and activations, in ``self.metrics``."""

    class Trainer:
        def __init__(self) -> None:
            self.model, self.optimizer, self.batches = _setup(device)
            self.metrics: dict[str, list] = {}

        def log(self, name: str, value: object) -> None:
            self.metrics.setdefault(name, []).append(value)

        def validation_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.mse_loss(self.model(x), y)

        def fit(self) -> None:
            for _epoch in range(2):
                _train_epoch(self.model, self.optimizer, self.batches[:3])
                self.model.eval()
                for x, y in self.batches:
                    loss = self.validation_step(x, y)
                    self.log("val_loss", loss)  # kept
                self.model.train()

    Trainer().fit()


def smoothed_loss_for_logging(device: torch.device) -> None:
    """An exponentially smoothed loss for a progress bar, kept as a tensor: every
    iteration's graph stays inside it."""
    model, optimizer, batches = _setup(device)
    running_loss = 0.0
    for x, y in batches:
        loss = _trained_loss(model, optimizer, x, y)
        running_loss = 0.98 * running_loss + 0.02 * loss  # kept
    print(f"smoothed loss {float(running_loss):.3f}")


def smoothed_loss_of_numbers(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    running_loss = 0.0
    for x, y in batches:
        loss = _trained_loss(model, optimizer, x, y)
        running_loss = 0.98 * running_loss + 0.02 * loss.item()
    print(f"smoothed loss {running_loss:.3f}")


def total_read_as_a_tensor_after_the_loop(device: torch.device) -> None:
    """The total is read with ``.item()`` after the loop: the fix keeps it a tensor."""
    model, optimizer, batches = _setup(device)
    total_loss = 0.0
    for x, y in batches:
        loss = _trained_loss(model, optimizer, x, y)
        total_loss += loss  # kept
    print(f"mean loss {total_loss.item() / len(batches):.3f}")


def running_mean_of_the_loss(device: torch.device) -> None:
    """A running mean of the loss for the log, updated in place after backward(): the mean
    keeps every iteration's graph."""
    model, optimizer, batches = _setup(device)
    avg_loss = 0.0
    for i, (x, y) in enumerate(batches):
        loss = _trained_loss(model, optimizer, x, y)
        avg_loss += (loss - avg_loss) / (i + 1)  # kept
    print(f"mean loss {float(avg_loss):.3f}")


def running_mean_in_an_evaluation(device: torch.device) -> None:
    """An evaluation without no_grad averaging its losses the incremental way."""
    model, optimizer, batches = _setup(device)
    _train_epoch(model, optimizer, batches)
    model.eval()
    mean = torch.zeros((), device=device)
    for i, (x, y) in enumerate(batches):
        mean = mean + (F.mse_loss(model(x), y) - mean) / (i + 1)  # kept
    print(f"validation loss {mean.item():.3f}")


def loss_smoothed_toward_each_step(device: torch.device) -> None:
    """``running += 0.1 * (loss - running)``: an exponential smoothing written as a step
    toward each new loss."""
    model, optimizer, batches = _setup(device)
    running = None
    for x, y in batches:
        loss = _trained_loss(model, optimizer, x, y)
        if running is None:
            running = loss.detach()
        else:
            running += 0.1 * (loss - running)  # kept
    print(f"smoothed loss {float(running):.3f}")


def batch_statistics_smoothed_with_their_graph(device: torch.device) -> None:
    """A batch norm written by hand whose running mean keeps each batch's graph (written
    ``m * mean`` where ``mean.detach()`` or ``torch.no_grad()`` was meant)."""

    class HandWrittenBatchNorm(nn.Module):
        def __init__(self, features: int, lerp: bool, momentum: float = 0.1) -> None:
            super().__init__()
            self.register_buffer("running_mean", torch.zeros(features))
            self.momentum, self.lerp = momentum, lerp

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            mean, m = x.mean(0), self.momentum
            if self.training and self.lerp:
                self.running_mean = torch.lerp(self.running_mean, mean, m)  # kept
            elif self.training:
                self.running_mean = (1 - m) * self.running_mean + m * mean  # kept
            return x - mean

    for lerp in (False, True):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 16), HandWrittenBatchNorm(16, lerp), nn.Linear(16, 1))
        model.to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for x, y in _setup(device)[2]:
            _trained_loss(model, optimizer, x, y)


def loss_smoothed_by_lerp(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    running = torch.zeros((), device=device)
    for x, y in batches:
        loss = _trained_loss(model, optimizer, x, y)
        running = torch.lerp(running, loss, 0.1)  # kept
    print(f"smoothed loss {running.item():.3f}")


def batch_statistics_smoothed_detached(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    running_mean = torch.zeros(16, device=device)
    for x, y in batches:
        hidden = model[1](model[0](x))
        running_mean = 0.9 * running_mean + 0.1 * hidden.mean(0).detach()
        optimizer.zero_grad()
        F.mse_loss(model[2](hidden), y).backward()
        optimizer.step()


def features_smoothed_over_time_steps_then_backpropagated(device: torch.device) -> None:
    """A temporal smoothing of features inside one forward: the chain is the graph wanted."""
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        smoothed = torch.zeros(8, 1, device=device)
        for t in range(4):
            smoothed = 0.7 * smoothed + 0.3 * model(x + t)
        optimizer.zero_grad()
        F.mse_loss(smoothed, y).backward()
        optimizer.step()


def two_predictions_mixed_each_step(device: torch.device) -> None:
    """``a * x0 + b * eps`` of two predictions (a diffusion model's step): no total."""
    model, optimizer, batches = _setup(device)
    for step, (x, y) in enumerate(batches):
        mixed = 0.8 * model(x) + 0.6 * model(x + step)
        optimizer.zero_grad()
        F.mse_loss(mixed, y).backward()
        optimizer.step()


def mixup_by_keyword_lerp(device: torch.device) -> None:
    """``torch.lerp`` with its operands named: each step's own mix, no total."""
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        mixed = torch.lerp(input=model(x), end=model(x.flip(0)), weight=0.3)
        optimizer.zero_grad()
        F.mse_loss(mixed, y).backward()
        optimizer.step()


def running_mean_of_numbers(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    avg_loss = 0.0
    for i, (x, y) in enumerate(batches):
        loss = _trained_loss(model, optimizer, x, y)
        avg_loss += (loss.item() - avg_loss) / (i + 1)
    print(f"mean loss {avg_loss:.3f}")


def leaky_integrator_backpropagated(device: torch.device) -> None:
    """A leaky integrator of a network's outputs over time steps (a spiking network's
    membrane, ``v += (input - v) / tau``), then backpropagated: the chain is the graph the
    backward() wants."""
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        v = torch.zeros_like(y)
        for t in range(5):
            v = v + (model(x + t) - v) / 2.0
        optimizer.zero_grad()
        F.mse_loss(v, y).backward()
        optimizer.step()


def state_relaxing_toward_its_own_function(device: torch.device) -> None:
    """``h += 0.5 * (torch.tanh(w * h + x) - h)``: a continuous-time recurrence whose target
    uses the state itself, backpropagated at the end."""
    w = torch.tensor(0.5, requires_grad=True, device=device)
    optimizer = torch.optim.SGD([w], lr=0.01)
    for _ in range(3):
        h = torch.zeros((), device=device)
        for t in range(6):
            h = h + 0.5 * (torch.tanh(w * h + t) - h)
        optimizer.zero_grad()
        h.backward()
        optimizer.step()


def discounted_losses_backpropagated(device: torch.device) -> None:
    """A loss discounted over an episode's steps, then backpropagated: the scaled chain is
    the graph the backward() wants."""
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        total = torch.zeros((), device=device)
        for step in range(4):
            total = 0.9 * total + F.mse_loss(model(x + step), y)
        optimizer.zero_grad()
        total.backward()
        optimizer.step()


def decoder_outputs_copied_into_a_buffer(device: torch.device) -> None:
    """A decoder's time steps copied into a buffer that the loss is computed from: the
    backward goes through every copy."""
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        outputs = torch.zeros(4, *y.shape, device=device)
        for t in range(4):
            outputs[t].copy_(model(x + t))
        optimizer.zero_grad()
        F.mse_loss(outputs.mean(0), y).backward()
        optimizer.step()


def validation_outputs_kept_in_dicts(device: torch.device) -> None:
    """A Lightning-style loop written by hand: each validation step's losses kept in a dict
    in ``validation_step_outputs``, without no_grad (Lightning runs validation under no_grad)."""
    model, optimizer, batches = _setup(device)
    _train_epoch(model, optimizer, batches)
    model.eval()
    validation_step_outputs = []
    for x, y in batches:
        prediction = model(x)
        loss = F.mse_loss(prediction, y)
        mae = (prediction - y).abs().mean()
        validation_step_outputs.append({"val_loss": loss, "val_mae": mae})  # kept
    torch.stack([o["val_loss"] for o in validation_step_outputs]).mean().item()


def losses_appended_with_their_step(device: torch.device) -> None:
    """A loss history of ``(step, loss)`` tuples."""
    model, optimizer, batches = _setup(device)
    history = []
    for step, (x, y) in enumerate(batches):
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append((step, loss))  # kept


def inputs_and_predictions_written_in_one_statement(device: torch.device) -> None:
    """Two buffers written by one statement in an evaluation; only the predictions carry
    history."""
    model, _, batches = _setup(device)
    model.eval()
    inputs = torch.zeros(len(batches), 8, 6, device=device)
    outputs = torch.zeros(len(batches), 8, 1, device=device)
    for i, (x, _y) in enumerate(batches):
        inputs[i], outputs[i] = x, model(x)  # kept


def a_total_kept_in_a_dict(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    stats = {"loss": 0.0}
    for x, y in batches:
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        stats["loss"] = stats["loss"] + loss  # kept


def losses_kept_for_each_epoch(device: torch.device) -> None:
    """A list made anew each epoch still keeps every batch's graph of the epoch."""
    model, optimizer, batches = _setup(device)
    for _epoch in range(2):
        epoch_losses = []
        for x, y in batches + batches:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            epoch_losses.append(loss)  # kept
        print(torch.stack(epoch_losses).mean().item())


def losses_in_a_deque(device: torch.device) -> None:
    """The losses logged in an unbounded deque: each keeps its graph, as in a list."""
    import collections

    model, optimizer, batches = _setup(device)
    history: collections.deque[torch.Tensor] = collections.deque()
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        history.append(loss)  # kept
    print(torch.stack(list(history)).mean().item())


def losses_in_a_bounded_window(device: torch.device) -> None:
    """A window of the last 3 losses for a smoothed log line: it keeps 3 graphs at most."""
    import collections

    model, optimizer, batches = _setup(device)
    window: collections.deque[torch.Tensor] = collections.deque(maxlen=3)
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        window.append(loss)
    print(torch.stack(list(window)).mean().item())


def predictions_of_a_helper_training_and_evaluation_share(device: torch.device) -> None:
    """One ``predict()`` for the training step (its line's outputs alive across the step: no
    list) and for an evaluation appending its outputs without ``no_grad()``."""
    model, optimizer, batches = _setup(device)

    def predict(x: torch.Tensor) -> torch.Tensor:
        return model(x).tanh()

    for _ in range(3):
        model.train()
        for x, y in batches:
            out = predict(x)
            loss = F.mse_loss(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        val = []
        for x, _ in batches:
            val.append(predict(x))  # kept
        print(torch.cat(val).mean().item())


def td_errors_kept_as_priorities(device: torch.device) -> None:
    """A prioritized replay's TD errors, (B,) tensors of the backpropagated graph, appended
    after the step for the buffer's next priorities: each keeps its graph's nodes."""
    model, optimizer, batches = _setup(device)
    priorities = []
    for x, y in batches:
        q = model(x).squeeze(1)
        td_error = (q - y.squeeze(1)).abs()
        loss = td_error.pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        priorities.append(td_error)  # kept
    print(len(priorities))


def predictions_kept_for_the_epochs_metric(device: torch.device) -> None:
    """Training predictions appended after the step for an accuracy over the epoch."""
    model, optimizer, batches = _setup(device)
    preds = []
    for x, y in batches:
        pred = model(x)
        loss = F.mse_loss(pred, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        preds.append(pred)  # kept
    print(torch.cat(preds).shape)


class _ReplayBuffer:
    def __init__(self) -> None:
        self.storage: list[tuple[torch.Tensor, ...]] = []

    def add(self, *transition: torch.Tensor) -> None:
        self.storage.append(transition)


def actions_kept_by_a_replay_buffer_method(device: torch.device) -> None:
    """DDPG's actor output stored without ``torch.no_grad()`` through ``buffer.add(...)``, a
    method of the program's buffer class: each transition keeps the actor's graph."""
    torch.manual_seed(0)
    actor = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 1)).to(device)
    critic = nn.Linear(4, 1).to(device)
    optimizer = torch.optim.Adam(critic.parameters(), lr=1e-3)
    buffer = _ReplayBuffer()
    for step in range(24):
        state = torch.randn(3, device=device)
        action = actor(state)
        buffer.add(state, action)  # kept
        if step >= 8:
            batch = buffer.storage[-8:]
            states = torch.stack([s for s, _ in batch])
            actions = torch.stack([a for _, a in batch]).detach()
            loss = critic(torch.cat([states, actions], 1)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


LEAKS = [
    validation_loss_weighted_by_batch_size,
    losses_kept_for_each_epoch,
    train_total_inplace,
    train_total_of_a_scaled_backward,
    train_total_rebound_before_backward,
    eval_without_no_grad,
    losses_appended,
    losses_in_a_dict_of_lists,
    losses_appended_by_a_helper,
    losses_kept_by_a_tracker,
    losses_kept_by_a_keyed_tracker,
    losses_in_a_dict_handed_to_a_helper,
    final_eval_in_eval_mode,
    evaluate_function_in_eval_mode,
    lightning_style_validation,
    final_eval_in_train_mode,
    inference_without_no_grad,
    validation_losses_appended_in_train_mode,
    rollout_kept_without_no_grad,
    predictions_collected_without_no_grad,
    validation_outputs_after_long_training,
    user_model_evaluated_without_no_grad_after_training,
    features_kept_by_a_forward_hook,
    features_kept_by_a_hook_object_after_training,
    features_by_layer_in_a_defaultdict,
    rollout_buffers_filled_without_no_grad,
    losses_written_into_a_preallocated_tensor,
    ema_without_no_grad,
    swa_average_with_lerp_without_no_grad,
    validation_loss_appended_once_an_epoch,
    ema_by_foreach_lerp_without_no_grad,
    ema_by_copy_and_running_average_without_no_grad,
    eval_logits_written_into_slices,
    validation_outputs_kept_in_dicts,
    losses_appended_with_their_step,
    inputs_and_predictions_written_in_one_statement,
    a_total_kept_in_a_dict,
    validation_losses_in_a_defaultdict,
    validation_losses_by_setdefault,
    losses_kept_by_setdefault,
    losses_kept_by_a_trainer_log_method,
    eval_predictions_copied_into_slices,
    smoothed_loss_for_logging,
    ema_remade_out_of_place_without_no_grad,
    ema_remade_by_lerp_without_no_grad,
    ema_of_shadows_cloned_with_their_history,
    ema_in_place_of_shadows_cloned_with_their_history,
    losses_logged_by_a_module_function,
    training_metrics_kept_in_lists,
    training_metric_computed_before_backward,
    losses_kept_by_a_trainer_with_odd_attributes,
    ema_of_parameters_cast_to_double,
    validation_losses_logged_by_a_trainer_method,
    running_mean_of_the_loss,
    total_read_as_a_tensor_after_the_loop,
    running_mean_in_an_evaluation,
    loss_smoothed_toward_each_step,
    batch_statistics_smoothed_with_their_graph,
    loss_smoothed_by_lerp,
    losses_in_a_deque,
    predictions_of_a_helper_training_and_evaluation_share,
    td_errors_kept_as_priorities,
    predictions_kept_for_the_epochs_metric,
    actions_kept_by_a_replay_buffer_method,
]


def item_totals(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    total, detached, losses = 0.0, torch.zeros((), device=device), []
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
        detached += loss.detach()
        losses.append(loss.item())


def gradient_accumulation(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    for _ in range(3):
        total = 0
        for x, y in batches:
            total = total + F.mse_loss(model(x), y)
        optimizer.zero_grad()
        (total / len(batches)).backward()
        optimizer.step()


def gradient_accumulation_inplace(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    total = torch.zeros((), device=device)
    for step, (x, y) in enumerate(batches * 2):
        total += F.mse_loss(model(x), y) / 4
        if (step + 1) % 4 == 0:
            optimizer.zero_grad()
            total.backward()
            optimizer.step()
            total = torch.zeros((), device=device)


def gradient_accumulation_with_a_short_last_window(device: torch.device) -> None:
    """Windows of 4 micro-batches over 7 batches an epoch: the last 3 of each epoch are
    summed and then dropped without backward() when the next epoch starts its total."""
    model, optimizer, batches = _setup(device)
    for _ in range(3):
        total = 0
        for step, (x, y) in enumerate(batches + batches[:1]):
            total = total + F.mse_loss(model(x), y) / 4
            if (step + 1) % 4 == 0:
                optimizer.zero_grad()
                total.backward()
                optimizer.step()
                total = 0


def chunk_losses_averaged_then_backward(device: torch.device) -> None:
    """The summed total is rebound to its mean before backward(): the Python total goes, its
    graph lives on in the mean, which backward() goes through."""
    model, optimizer, batches = _setup(device)
    for _ in range(3):
        loss = 0
        for x, y in batches[:4]:
            loss = loss + F.mse_loss(model(x), y)
        loss = loss / 4
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def l2_penalty_summed_over_parameters(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        penalty = 0.0
        for p in model.parameters():
            penalty = penalty + p.pow(2).sum()
        loss = F.mse_loss(model(x), y) + 1e-4 * penalty
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def helper_stacks_its_losses_for_the_caller(device: torch.device) -> None:
    """A multi-head loss: a helper keeps one loss per head in a list and returns their mean,
    which the caller backpropagates."""
    model, optimizer, batches = _setup(device)

    def heads_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        losses = []
        for k in range(4):
            losses.append(F.mse_loss(out * k, y))
        return torch.stack(losses).mean()

    for x, y in batches:
        loss = heads_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def reinforce_policy_loss_list(device: torch.device) -> None:
    """PyTorch's REINFORCE example: per-step terms in a list, `torch.cat(...).sum()` (the list
    rebound to the sum) and backward() at the episode's end."""
    torch.manual_seed(0)
    policy = nn.Linear(4, 2).to(device)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    for _ in range(3):
        log_probs = []
        for _ in range(8):
            log_probs.append(torch.log_softmax(policy(torch.randn(1, 4, device=device)), 1)[:, 0])
        policy_loss = []
        for log_prob in log_probs:
            policy_loss.append(-log_prob * 1.0)
        policy_loss = torch.cat(policy_loss).sum()
        optimizer.zero_grad()
        policy_loss.backward()
        optimizer.step()
        del log_probs


def policy_log_probs_and_a_detached_copy(device: torch.device) -> None:
    """A policy sampling from a Categorical each step: detached log-probabilities kept for
    logging, the others summed and backpropagated at the episode's end."""
    from torch.distributions import Categorical

    torch.manual_seed(0)
    policy = nn.Linear(4, 3).to(device)
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.01)
    history = []
    for _ in range(3):
        log_probs = []
        for _ in range(6):
            m = Categorical(probs=policy(torch.randn(4, device=device)).softmax(-1))
            action = m.sample()
            history.append(m.log_prob(action).detach())
            log_probs.append(m.log_prob(action))
        optimizer.zero_grad()
        (-torch.stack(log_probs).sum()).backward()
        optimizer.step()


def eval_under_no_grad(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    for _ in range(2):
        for x, y in batches:
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
        val_loss = 0
        model.eval()
        with torch.no_grad():
            for x, y in batches:
                val_loss += F.mse_loss(model(x), y)
        model.train()


def frozen_backbone_accumulation(device: torch.device) -> None:
    """Fine-tuning: the backbone in eval mode (frozen batch-norm statistics), the head
    training, micro-batch losses summed before backward()."""
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU()).to(device)
    head = nn.Linear(16, 1).to(device)
    optimizer = torch.optim.SGD([*backbone.parameters(), *head.parameters()], lr=0.01)
    backbone.eval()
    _, _, batches = _setup(device)
    for _ in range(2):
        total = 0
        for x, y in batches:
            total = total + F.mse_loss(head(backbone(x)), y)
        optimizer.zero_grad()
        (total / len(batches)).backward()
        optimizer.step()


def gan_fake_detach(device: torch.device) -> None:
    torch.manual_seed(0)
    G, D = nn.Linear(4, 6).to(device), nn.Linear(6, 1).to(device)
    opt_g = torch.optim.SGD(G.parameters(), lr=0.01)
    opt_d = torch.optim.SGD(D.parameters(), lr=0.01)
    real = torch.randn(8, 6, device=device)
    for _ in range(5):
        fake = G(torch.randn(8, 4, device=device))
        opt_d.zero_grad()
        err_d = D(real).mean() - D(fake.detach()).mean()
        err_d.backward()
        opt_d.step()
        opt_g.zero_grad()
        err_g = -D(fake).mean()
        err_g.backward()
        opt_g.step()


def truncated_bptt(device: torch.device) -> None:
    torch.manual_seed(0)
    cell = nn.RNNCell(3, 5).to(device)
    head = nn.Linear(5, 1).to(device)
    optimizer = torch.optim.SGD([*cell.parameters(), *head.parameters()], lr=0.01)
    hidden = torch.zeros(2, 5, device=device)
    for _ in range(4):
        hidden = hidden.detach()
        loss = torch.zeros((), device=device)
        for _ in range(5):
            hidden = cell(torch.randn(2, 3, device=device), hidden)
            loss = loss + head(hidden).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def ema_under_no_grad(device: torch.device) -> None:
    """An EMA updated under no_grad, and one updated from ``p.detach()``: nothing recorded."""
    model, optimizer, batches = _setup(device)
    ema = [p.detach().clone() for p in model.parameters()]
    ema_of_detached = [p.detach().clone() for p in model.parameters()]
    for x, y in batches:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        with torch.no_grad():
            for e, p in zip(ema, model.parameters()):
                e.mul_(0.9).add_(p, alpha=0.1)
        for e, p in zip(ema_of_detached, model.parameters()):
            e.mul_(0.9).add_(p.detach(), alpha=0.1)


def reinforce_episode_sums(device: torch.device) -> None:
    torch.manual_seed(0)
    policy = nn.Linear(4, 2).to(device)
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.01)
    for _ in range(4):
        log_probs = []
        for _ in range(6):
            probs = policy(torch.randn(4, device=device)).softmax(-1)
            log_probs.append(torch.log(probs[0]))
        optimizer.zero_grad()
        loss = -sum(log_probs)
        loss.backward()
        optimizer.step()
        del log_probs[:]


def scalar_recurrence(device: torch.device) -> None:
    w = torch.tensor(0.5, requires_grad=True, device=device)
    optimizer = torch.optim.SGD([w], lr=0.01)
    for _ in range(3):
        x = torch.ones((), device=device)
        for _ in range(6):
            x = x + w * x
        optimizer.zero_grad()
        x.backward()
        optimizer.step()


def actor_critic_with_a_critic_step_each_step(device: torch.device) -> None:
    """An episode's actor loss summed with `+=` and backpropagated at the episode's end, while
    the critic learns online: its own backward() and step() at every step (other graphs)."""
    torch.manual_seed(0)
    actor, critic = nn.Linear(4, 2).to(device), nn.Linear(4, 1).to(device)
    actor_optimizer = torch.optim.SGD(actor.parameters(), lr=0.1)
    critic_optimizer = torch.optim.SGD(critic.parameters(), lr=0.1)
    for _ in range(3):
        actor_loss = 0
        for _ in range(6):
            state = torch.randn(4, device=device)
            actor_loss += -actor(state).log_softmax(0)[0]
            value_loss = critic(state).pow(2).sum()
            critic_optimizer.zero_grad()
            value_loss.backward()
            critic_optimizer.step()
        actor_optimizer.zero_grad()
        actor_loss.backward()
        actor_optimizer.step()


def weight_norm_logged_after_evaluation(device: torch.device) -> None:
    """The weights' norm logged with `sum(...)` over the parameters, the model left in eval mode
    after validation and no `no_grad` around it: one statement's adds, nothing kept."""
    model, optimizer, batches = _setup(device)
    for _ in range(3):
        model.train()
        for x, y in batches:
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
        model.eval()
        norm = sum(p.pow(2).sum() for p in model.parameters()).sqrt().item()
        assert norm > 0


def eval_mode_finetuning_with_micro_batches(device: torch.device) -> None:
    """Dropout off for the whole run (model.eval(), as RLHF code fine-tunes), micro-batch
    losses summed before one backward per step: the first step's sum is not an evaluation."""
    model, optimizer, batches = _setup(device)
    model.eval()
    for _ in range(2):
        optimizer.zero_grad()
        total = 0
        for x, y in batches[:4]:
            total = total + F.mse_loss(model(x), y) / 4
        total.backward()
        optimizer.step()


class _Hypotheses(nn.Module):
    """A shared body and several heads, one prediction each (multiple-hypothesis learning)."""

    def __init__(self, heads: int = 5) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.ReLU())
        self.heads = nn.ModuleList([nn.Linear(16, 1) for _ in range(heads)])

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        h = self.body(x)
        outputs = []
        for head in self.heads:
            outputs.append(head(h))
        return outputs


def winner_takes_all_outputs(device: torch.device) -> None:
    """Every head's prediction in a list, only the best one's loss backpropagated: the others'
    graphs go without a backward() through them, as meant."""
    _, _, batches = _setup(device)
    model = _Hypotheses().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in batches:
        predictions = model(x)
        losses = []
        for prediction in predictions:
            losses.append(F.mse_loss(prediction, y))
        optimizer.zero_grad()
        min(losses).backward()
        optimizer.step()


def decoder_outputs_stacked_for_the_loss(device: torch.device) -> None:
    """A decoder's per-step outputs collected in a list, stacked and backpropagated."""
    torch.manual_seed(0)
    cell, readout = nn.GRUCell(3, 8).to(device), nn.Linear(8, 3).to(device)
    optimizer = torch.optim.Adam([*cell.parameters(), *readout.parameters()], lr=1e-3)
    for _ in range(3):
        h = torch.zeros(4, 8, device=device)
        step_input = torch.zeros(4, 3, device=device)
        outputs = []
        for _t in range(6):
            h = cell(step_input, h)
            out = readout(h)
            outputs.append(out)
            step_input = out.detach()
        loss = torch.stack(outputs).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def best_of_separate_networks(device: torch.device) -> None:
    """Multiple-choice learning over separate networks: each step keeps every member's
    prediction in a list and backpropagates the best one's loss (no shared node)."""
    torch.manual_seed(0)
    members = [nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1)) for _ in range(4)]
    members = [m.to(device) for m in members]
    optimizer = torch.optim.SGD([p for m in members for p in m.parameters()], lr=0.01)
    x, y = torch.randn(8, 6, device=device), torch.randn(8, 1, device=device)
    for _ in range(12):
        predictions = []
        for member in members:
            predictions.append(member(x))
        losses = [F.mse_loss(p, y) for p in predictions]
        best = min(range(len(losses)), key=lambda i: losses[i].item())
        optimizer.zero_grad()
        losses[best].backward()
        optimizer.step()


def hardest_negative(device: torch.device) -> None:
    """A triplet loss on the hardest of several negatives, each embedded by its own call."""
    torch.manual_seed(0)
    embed = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4)).to(device)
    optimizer = torch.optim.Adam(embed.parameters(), lr=1e-3)
    for _ in range(12):
        negatives = []
        for _k in range(5):
            negatives.append(embed(torch.randn(8, 6, device=device)))
        anchor, positive = (
            embed(torch.randn(8, 6, device=device)),
            embed(torch.randn(8, 6, device=device)),
        )
        distances = [(anchor - n).pow(2).sum(1).mean() for n in negatives]
        hardest = negatives[min(range(5), key=lambda k: distances[k].item())]
        loss = F.triplet_margin_loss(anchor, positive, hardest)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def features_detached_in_the_hook(device: torch.device) -> None:
    features: list = []
    _evaluate_with_a_hook(lambda m, i, output: features.append(output.detach()), features, device)


def features_read_and_cleared_every_batch(device: torch.device) -> None:
    """An evaluation without ``no_grad`` reading the hooked activations of each batch and
    clearing the list: nothing is kept from one batch to the next."""
    features: list = []
    model = _TutorialNet().to(device).eval()
    model.fc1.register_forward_hook(lambda m, i, output: features.append(output))
    model.fc2.register_forward_hook(lambda m, i, output: features.append(output))
    norms = []
    for _batch in range(30):
        model(torch.randn(8, 6, device=device))
        norms.append(features[0].norm().item())
        features.clear()


def feature_matching_loss_from_hooks(device: torch.device) -> None:
    """A perceptual / feature-matching loss: the hooks collect a frozen critic's features each
    step, the loss is computed from them and backpropagated, the list cleared."""
    torch.manual_seed(0)
    generator = nn.Sequential(nn.Linear(4, 6), nn.Tanh()).to(device)
    critic = _TutorialNet().to(device).eval()
    critic.requires_grad_(False)
    features: list = []

    def keep_features(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        features.append(output)

    critic.fc1.register_forward_hook(keep_features)
    critic.fc2.register_forward_hook(keep_features)
    optimizer = torch.optim.Adam(generator.parameters(), lr=1e-3)
    target = torch.randn(8, 6, device=device)
    for _step in range(30):
        features.clear()
        critic(target)
        wanted = [f.detach() for f in features]
        features.clear()
        critic(generator(torch.randn(8, 4, device=device)))
        loss = sum(F.mse_loss(f, w) for f, w in zip(features, wanted))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def grad_cam_activations_per_image(device: torch.device) -> None:
    """Grad-CAM over a batch of images: the hook keeps each image's activations, the class
    score of each is backpropagated to weigh them."""
    torch.manual_seed(0)
    model = _TutorialNet().to(device).eval()
    activations: list = []
    model.fc2.register_forward_hook(lambda m, i, output: activations.append(output))
    maps = []
    for _image in range(30):
        x = torch.randn(1, 6, device=device)
        score = model(x)[0].max()
        kept = activations[-1]
        kept.retain_grad()
        score.backward()
        maps.append((kept.grad * kept).sum().item())
    print(f"{len(maps)} maps")


def validation_loss_with_a_weight_penalty_summed_in_one_call(device: torch.device) -> None:
    """A VAE-style loss whose weight penalty is one ``sum()`` over the parameters, validated in
    eval mode without ``no_grad`` (each number read with ``.item()``): the adds of that one
    call are no accumulation across iterations."""
    model, _, batches = _setup(device)
    model.eval()
    total = 0.0
    for x, y in batches:
        loss = F.mse_loss(model(x), y) + 1e-4 * sum(p.pow(2).sum() for p in model.parameters())
        total += loss.item()


def reinforce_log_probs_in_a_buffer(device: torch.device) -> None:
    """REINFORCE with a preallocated buffer of log-probabilities: backward() at the episode's
    end goes through every write."""
    torch.manual_seed(0)
    policy = nn.Linear(4, 2).to(device)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    for _ in range(3):
        log_probs = torch.zeros(8, device=device)
        for t in range(8):
            logits = policy(torch.randn(4, device=device))
            log_probs[t] = torch.log_softmax(logits, 0)[0]
        loss = -(log_probs * torch.randn(8, device=device)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def decoder_outputs_written_into_a_buffer(device: torch.device) -> None:
    """The seq2seq tutorial's decoder: ``outputs[t] = output`` into a preallocated tensor, the
    loss over all of it backpropagated."""
    torch.manual_seed(0)
    cell, readout = nn.GRUCell(3, 8).to(device), nn.Linear(8, 3).to(device)
    optimizer = torch.optim.Adam([*cell.parameters(), *readout.parameters()], lr=1e-3)
    for _ in range(3):
        outputs = torch.zeros(6, 4, 3, device=device)
        h = torch.zeros(4, 8, device=device)
        step_input = torch.zeros(4, 3, device=device)
        for t in range(6):
            h = cell(step_input, h)
            output = readout(h)
            outputs[t] = output
            step_input = output.argmax(1, keepdim=True).float().expand(4, 3)
        loss = outputs.pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


class _ResidualBlock(nn.Module):
    """A hand-written residual block: in-place adds of the shortcut and of a parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.shift = nn.Parameter(torch.zeros(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc(x)
        out += x
        out += self.shift
        return torch.relu(out)


def residual_adds_in_place(device: torch.device) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(_ResidualBlock(), _ResidualBlock(), nn.Linear(6, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(5):
        x, y = torch.randn(8, 6, device=device), torch.randn(8, 1, device=device)
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()


def inner_loop_updates_within_a_step(device: torch.device) -> None:
    """A differentiable inner loop (MAML-like) updating a clone of the weights in place
    several times within one step, then backpropagating through all of it."""
    torch.manual_seed(0)
    w = torch.randn(6, 1, device=device, requires_grad=True)
    optimizer = torch.optim.SGD([w], lr=0.01)
    for _ in range(4):
        x, y = torch.randn(8, 6, device=device), torch.randn(8, 1, device=device)
        fast = w.clone()
        for _k in range(3):
            fast.sub_(0.1 * (x @ fast - y).mean())
        optimizer.zero_grad()
        F.mse_loss(x @ fast, y).backward()
        optimizer.step()


def decoder_in_eval_mode_writing_its_time_steps(device: torch.device) -> None:
    """Fine-tuning with frozen BatchNorm statistics (the model in eval mode): a decoder writes
    its time steps into a preallocated tensor, then backward() goes through all of them."""
    torch.manual_seed(0)
    cell, head = nn.GRUCell(3, 8).to(device), nn.Linear(8, 3).to(device)
    cell.eval()
    head.eval()
    optimizer = torch.optim.Adam([*cell.parameters(), *head.parameters()], lr=1e-3)
    for _ in range(3):
        outputs = torch.zeros(6, 4, 3, device=device)
        h = torch.zeros(4, 8, device=device)
        for t in range(6):
            h = cell(torch.randn(4, 3, device=device), h)
            outputs[t] = head(h)
        optimizer.zero_grad()
        outputs.pow(2).mean().backward()
        optimizer.step()


def deep_ensemble_losses_per_batch(device: torch.device) -> None:
    """Each member's own step; a list of the batch's members' losses, made anew each batch,
    for the mean logged: as many losses kept however long it trains."""
    torch.manual_seed(0)
    members = [nn.Linear(6, 1).to(device) for _ in range(8)]
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.01) for m in members]
    x, y = torch.randn(8, 6, device=device), torch.randn(8, 1, device=device)
    for _batch in range(6):
        batch_losses = []
        for member, optimizer in zip(members, optimizers):
            loss = F.mse_loss(member(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            batch_losses.append(loss)
        print(torch.stack(batch_losses).mean().item())


def task_losses_backpropagated_one_by_one(device: torch.device) -> None:
    """PCGrad: each task's loss backpropagated (retain_graph) by a helper given the list."""
    model, optimizer, batches = _setup(device)
    head = nn.Linear(1, 4).to(device)

    def backward_each(objectives: list[torch.Tensor]) -> None:
        grads = []
        for objective in objectives:
            optimizer.zero_grad()
            objective.backward(retain_graph=True)
            grads.append([p.grad.clone() for p in model.parameters()])
        for p, *task_grads in zip(model.parameters(), *grads):
            p.grad = torch.stack(task_grads).mean(0)

    for x, y in batches:
        out = head(model(x))
        losses = [F.mse_loss(out[:, k], y[:, 0]) for k in range(4)]
        backward_each(losses)
        optimizer.step()


def td_errors_detached_as_priorities(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    priorities = []
    for x, y in batches:
        q = model(x).squeeze(1)
        td_error = (q - y.squeeze(1)).abs()
        loss = td_error.pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        priorities.append(td_error.detach())
    print(len(priorities))


def actions_stored_detached_by_a_replay_buffer_method(device: torch.device) -> None:
    torch.manual_seed(0)
    actor = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 1)).to(device)
    critic = nn.Linear(4, 1).to(device)
    optimizer = torch.optim.Adam(critic.parameters(), lr=1e-3)
    buffer = _ReplayBuffer()
    for step in range(24):
        state = torch.randn(3, device=device)
        with torch.no_grad():
            action = actor(state)
        buffer.add(state, action)
        if step >= 8:
            batch = buffer.storage[-8:]
            states = torch.stack([s for s, _ in batch])
            actions = torch.stack([a for _, a in batch])
            loss = critic(torch.cat([states, actions], 1)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def step_outputs_kept_within_a_step_for_its_loss(device: torch.device) -> None:
    """An unrolled model's per-time-step outputs appended to a list made anew each step and
    stacked for that step's loss: every graph is backpropagated, nothing grows."""
    model, optimizer, batches = _setup(device)
    for x, y in batches:
        outputs = []
        h = x
        for _ in range(3):
            out = model(h)
            outputs.append(out)
            h = x + out
        loss = F.mse_loss(torch.stack(outputs).mean(0), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


CLEAN = [
    parameters_flattened_into_a_buffer_each_step,
    training_metrics_kept_as_numbers,
    ema_remade_out_of_place_under_no_grad,
    ema_of_shadows_cloned_under_no_grad,
    weights_mixed_with_a_constant_in_each_forward,
    decoder_outputs_copied_into_a_buffer,
    smoothed_loss_of_numbers,
    discounted_losses_backpropagated,
    eval_mode_finetuning_with_micro_batches,
    item_totals,
    gradient_accumulation,
    gradient_accumulation_inplace,
    gradient_accumulation_with_a_short_last_window,
    chunk_losses_averaged_then_backward,
    l2_penalty_summed_over_parameters,
    helper_stacks_its_losses_for_the_caller,
    reinforce_policy_loss_list,
    policy_log_probs_and_a_detached_copy,
    frozen_backbone_accumulation,
    eval_under_no_grad,
    gan_fake_detach,
    truncated_bptt,
    ema_under_no_grad,
    reinforce_episode_sums,
    scalar_recurrence,
    actor_critic_with_a_critic_step_each_step,
    weight_norm_logged_after_evaluation,
    winner_takes_all_outputs,
    decoder_outputs_stacked_for_the_loss,
    best_of_separate_networks,
    hardest_negative,
    features_detached_in_the_hook,
    features_read_and_cleared_every_batch,
    feature_matching_loss_from_hooks,
    grad_cam_activations_per_image,
    validation_loss_with_a_weight_penalty_summed_in_one_call,
    reinforce_log_probs_in_a_buffer,
    decoder_outputs_written_into_a_buffer,
    residual_adds_in_place,
    inner_loop_updates_within_a_step,
    decoder_in_eval_mode_writing_its_time_steps,
    running_mean_of_numbers,
    leaky_integrator_backpropagated,
    state_relaxing_toward_its_own_function,
    batch_statistics_smoothed_detached,
    features_smoothed_over_time_steps_then_backpropagated,
    two_predictions_mixed_each_step,
    mixup_by_keyword_lerp,
    deep_ensemble_losses_per_batch,
    task_losses_backpropagated_one_by_one,
    td_errors_detached_as_priorities,
    losses_in_a_bounded_window,
    actions_stored_detached_by_a_replay_buffer_method,
    step_outputs_kept_within_a_step_for_its_loss,
]


def _marked_lines(program: Callable[..., None]) -> set[int]:
    lines, start = inspect.getsourcelines(program)
    return {start + i for i, text in enumerate(lines) if text.rstrip().endswith("# kept")}


def _run(program: Callable[..., None], device: torch.device) -> list[tuple[str, int, str]]:
    with tensor_dap.watch(rules=["graph-kept"]) as watch:
        program(device)
    assert not watch.failed
    return [(f.rule, f.line, f.message) for f in watch.findings]


@pytest.fixture(params=["c", "python"])
def path(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    mode.use_native(request.param == "c")
    yield request.param
    mode.use_native(True)


@pytest.mark.parametrize("program", LEAKS, ids=lambda p: p.__name__)
def test_each_leak_is_reported_at_its_accumulating_line(program, path) -> None:  # type: ignore[no-untyped-def]
    found = _run(program, DEVICE)
    assert {line for _, line, _ in found} == _marked_lines(program)
    for _, _, message in found:
        assert "autograd history" in message
        # (outputs kept, not losses: a detached tensor, not a number; under no_grad() when no
        # backward() went through them)
        consumed = "backward() freed their saved tensors" in message
        assert ".item()" in message or (
            ".detach()" in message and (consumed or "no_grad()" in message)
        )
        assert "operand " not in message  # every tensor named as the line writes it


@pytest.mark.parametrize("program", CLEAN, ids=lambda p: p.__name__)
def test_correct_idioms_are_not_reported(program, path) -> None:  # type: ignore[no-untyped-def]
    assert _run(program, DEVICE) == []


def test_without_column_positions_as_before_python_3_11(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Python 3.9 and 3.10 give no instruction columns: what runs on a line is read from the
    bytecode and the line's calls instead (a ``sum()`` over parameters was a chain there)."""
    from tensor_dap.agent import naming

    monkeypatch.setattr(naming, "current_node", lambda frame: None)
    for program in CLEAN:
        assert _run(program, DEVICE) == [], program.__name__
    for program in LEAKS:
        found = {line for _, line, _ in _run(program, DEVICE)}
        assert found == _marked_lines(program), program.__name__


def test_the_message_says_how_many_iterations_and_what_is_kept() -> None:
    (_, _, message), *_ = _run(train_total_inplace, DEVICE)
    assert "after 3 iterations total_loss holds the graphs of all 3" in message
    assert "autograd nodes" in message
    ((_, _, left),) = _run(eval_without_no_grad, DEVICE)
    assert "over 6 iterations" in left and "KiB of saved activations" in left
    assert "torch.no_grad()" in left
    ((_, _, evaluating),) = _run(final_eval_in_eval_mode, DEVICE)
    assert "after 3 iterations val_loss holds the graphs of all 3" in evaluating
    assert "the model it runs is in eval mode and no backward() has gone through it" in evaluating


def test_a_total_of_losses_whose_backward_started_elsewhere_is_reported_as_it_grows() -> None:
    """``(loss * 0.5).backward()``, ``(loss + penalty).backward()``,
    ``scaler.scale(loss).backward()``: the loss is not the backward's root, but the backward
    freed its graph; reported at the third iteration, not when the total is dropped."""
    ((_, _, message),) = _run(train_total_of_a_scaled_backward, DEVICE)
    assert "after 3 iterations total_loss holds the graphs of all 3" in message


@pytest.mark.parametrize(
    ("program", "fix"),
    [
        (losses_appended, "`losses.append(loss.item())` (or `losses.append(loss.detach())`)"),
        (losses_in_a_dict_of_lists, '`history["loss"].append(loss.item())`'),
        (losses_appended_by_a_helper, "`_record(losses, loss.item())`"),
        (losses_kept_by_a_tracker, "`tracker.update(loss.item())`"),
        (losses_kept_by_a_keyed_tracker, '`tracker.update("loss", loss.item())`'),
        (losses_appended_with_their_step, "`history.append((step, loss.item()))`"),
        (losses_kept_by_setdefault, '`history.setdefault("loss", []).append(loss.item())`'),
        (losses_kept_by_a_trainer_log_method, '`self.log("train_loss", loss.item())`'),
        (losses_logged_by_a_module_function, '`_log("loss", loss.item())`'),
    ],
)
def test_the_fix_is_the_users_own_line_keeping_a_number(program, fix: str) -> None:  # noqa: ANN001
    ((_, _, message),) = _run(program, DEVICE)
    assert f"Keep a number or a detached tensor: {fix}" in message


def test_a_product_added_is_made_a_number_as_a_whole() -> None:
    """``(term * len(x)).item()``: ``len(x).item()`` would call ``.item()`` of an int."""
    ((_, _, message),) = _run(validation_loss_weighted_by_batch_size, DEVICE)
    assert (
        "`val_loss += (F.mse_loss(model(x), y) * len(x)).item()` "
        "(or `(F.mse_loss(model(x), y) * len(x)).detach()`)"
    ) in message
    assert " keeps 0 tensors" not in message


def test_a_buffer_written_each_step_names_the_write_and_its_fix() -> None:
    found = _run(rollout_buffers_filled_without_no_grad, DEVICE)
    messages = sorted(message for _, _, message in found)
    assert messages[0].startswith("`logprobs[step] = log_prob` (test_graph_kept.py:")
    assert (
        "logprobs collected log_prob, which carries autograd history, over 6 iterations"
        in (messages[0])
    )
    assert "Write a detached tensor: `logprobs[step] = log_prob.detach()`" in messages[0]
    ((_, _, message),) = _run(losses_written_into_a_preallocated_tensor, DEVICE)
    assert message.startswith("`history[i] = loss`: history collects loss")
    assert "Write a detached tensor: `history[i] = loss.detach()`" in message


def test_an_ema_updated_outside_no_grad_says_what_grows_and_the_fix() -> None:
    ((_, _, message),) = _run(ema_without_no_grad, DEVICE)
    assert message.startswith(
        "`p_ema.mul_(0.99).add_(p, alpha=0.01)`: p_ema is updated in place from p, which "
        "carries autograd history, outside `torch.no_grad()`"
    )
    assert "each of the 4 tensors updated here carries autograd history, a chain" in message
    assert "grows by 2 nodes each optimizer step (3 steps so far)" in message
    assert "Run the update under `with torch.no_grad():` (or use `p.detach()`)" in message


def test_an_ema_remade_out_of_place_names_the_parameter_and_the_fix() -> None:
    ((_, _, message),) = _run(ema_remade_out_of_place_without_no_grad, DEVICE)
    assert message.startswith(
        "`self.shadow[n] = self.decay * self.shadow[n] + p * (1 - self.decay)`: self.shadow[n] "
        "is remade each optimizer step from p, which requires grad, outside `torch.no_grad()`"
    )
    assert "(3 steps so far)" in message
    assert "Run the update under `with torch.no_grad():` (or remake it from `p.detach()`)" in (
        message
    )


def test_a_training_metric_kept_says_to_keep_a_number_not_to_stop_gradients() -> None:
    ((_, _, message),) = _run(training_metric_computed_before_backward, DEVICE)
    assert message.startswith("`maes.append(F.l1_loss(out, y))` (test_graph_kept.py:")
    assert "no backward() went through them" in message
    assert "saved activations" in message  # (the output each keeps alive)
    assert "or compute it under `torch.no_grad()` (the training step's backward()" in message
    assert "run the loop under" not in message


def test_a_smoothed_loss_in_a_conditional_expression_is_fixed_in_both_branches() -> None:
    def smoothed_from_the_first_loss(device: torch.device) -> None:
        model, optimizer, batches = _setup(device)
        running = None
        for x, y in batches:
            loss = _trained_loss(model, optimizer, x, y)
            running = loss if running is None else 0.9 * running + 0.1 * loss

    ((_, _, message),) = _run(smoothed_from_the_first_loss, DEVICE)
    assert message.startswith("`running = loss if running is None else 0.9 * running + 0.1")
    fixed = "`running = loss.item() if running is None else 0.9 * running + (0.1 * loss).item()`"
    assert fixed in message


def test_a_total_still_alive_when_training_resumes_is_said_to_be_alive() -> None:
    """Reported at the next training step's backward(): the total is not dropped, it still
    holds the graphs."""

    def evaluate_then_train(device: torch.device) -> None:
        model, optimizer, batches = _setup(device)
        val_loss = 0
        for x, y in batches:
            val_loss += F.mse_loss(model(x), y)
        _train_epoch(model, optimizer, batches)
        assert val_loss.item() > 0

    ((_, _, message),) = _run(evaluate_then_train, DEVICE)
    assert "over 6 iterations, and no backward() went through it" in message
    assert "alive until training resumed, and still holds it." in message


def test_each_statement_is_worded_as_it_writes_or_adds() -> None:
    ((_, _, message),) = _run(inputs_and_predictions_written_in_one_statement, DEVICE)
    assert "outputs collected model(x), which carries autograd history" in message
    assert "Write a detached tensor: `outputs[i] = model(x).detach()`" in message
    ((_, _, message),) = _run(a_total_kept_in_a_dict, DEVICE)
    assert message.startswith('`stats["loss"] + loss`: stats["loss"] accumulates loss, which')
    assert '`stats["loss"] += loss.item()`' in message


def test_a_slice_written_names_the_value_not_the_slice() -> None:
    ((_, _, message),) = _run(eval_logits_written_into_slices, DEVICE)
    assert message.startswith("`predictions[i * 8 : (i + 1) * 8] = model(x)` (test_graph_kept.py:")
    assert "predictions collected model(x), which carries autograd history, over 6" in message
    assert "Write a detached tensor: `predictions[i * 8 : (i + 1) * 8] = model(x).detach()`" in (
        message
    )


def test_a_copy_into_a_slice_names_the_buffer_and_detaches_the_copied_value() -> None:
    ((_, _, message),) = _run(eval_predictions_copied_into_slices, DEVICE)
    assert message.startswith("`predictions.narrow(0, i * 8, 8).copy_(model(x))`")
    assert "predictions collected model(x), which carries autograd history" in message
    assert "`predictions.narrow(0, i * 8, 8).copy_(model(x).detach())`" in message


def test_a_smoothed_loss_is_fixed_on_its_own_statement() -> None:
    ((_, _, message),) = _run(smoothed_loss_for_logging, DEVICE)
    assert message.startswith("`running_loss = 0.98 * running_loss + 0.02 * loss`: running_loss")
    assert "after 3 iterations running_loss holds the graphs of all 3" in message
    assert "`running_loss = 0.98 * running_loss + (0.02 * loss).item()`" in message


def test_a_running_mean_is_fixed_on_what_it_moves_toward() -> None:
    ((_, _, message),) = _run(running_mean_of_the_loss, DEVICE)
    assert message.startswith("`avg_loss += (loss - avg_loss) / (i + 1)`: avg_loss accumulates")
    assert "after 3 iterations avg_loss holds the graphs of all 3" in message
    assert "`avg_loss += (loss.item() - avg_loss) / (i + 1)`" in message
    ((_, _, message),) = _run(running_mean_in_an_evaluation, DEVICE)
    assert "the model it runs is in eval mode" in message
    fixed = "`mean = mean + (F.mse_loss(model(x), y).item() - mean) / (i + 1)`"
    assert fixed in message


def test_a_smoothed_statistic_is_fixed_with_a_detached_tensor_not_a_number() -> None:
    (_, _, scaled), (_, _, lerped) = _run(batch_statistics_smoothed_with_their_graph, DEVICE)
    assert "self.running_mean accumulates m * mean, which carries" in scaled
    assert scaled.endswith(
        "Smooth a detached tensor: `self.running_mean = (1 - m) * self.running_mean"
        " + (m * mean).detach()`, or update it under `torch.no_grad()`."
    )
    assert ".item()" not in scaled + lerped
    assert "`self.running_mean = torch.lerp(self.running_mean, mean.detach(), m)`" in lerped


def test_a_total_read_as_a_tensor_later_is_fixed_with_a_detached_term() -> None:
    """``total_loss.item()`` after the loop: ``total_loss += loss.item()`` would break it."""
    ((_, _, message),) = _run(total_read_as_a_tensor_after_the_loop, DEVICE)
    assert "Accumulate a detached tensor: `total_loss += loss.detach()` (the later " in message
    assert "`total_loss.item()` needs a tensor)" in message
    ((_, _, message),) = _run(train_total_inplace, DEVICE)[:1]
    assert "`total_loss += loss.item()` (or `loss.detach()`)" in message


def validation_loss_recorded_by_a_helper(device: torch.device) -> None:
    """A helper keeps the validation loss; the other branch appends ``val.item()`` (never run)."""
    model, optimizer, batches = _setup(device)
    history: list = []

    def record(value: torch.Tensor) -> None:
        history.append(value)

    for use_helper in (True, True, True, True):
        for x, y in batches:
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
        model.eval()
        val = F.mse_loss(model(batches[0][0]), batches[0][1])
        if use_helper:
            record(val)
        else:
            history.append(val.item())  # correct, and never run
        model.train()


def test_an_append_of_a_number_is_not_named_as_keeping_a_tensor() -> None:
    """The list keeping the tensor is appended to by a helper; the line appending ``val.item()``
    appends a number: it is not the finding's line."""
    lines, start = inspect.getsourcelines(validation_loss_recorded_by_a_helper)
    never_run = start + next(i for i, t in enumerate(lines) if "history.append(val.item())" in t)
    assert never_run not in {
        line for _, line, _ in _run(validation_loss_recorded_by_a_helper, DEVICE)
    }


def test_a_list_of_losses_never_backpropagated_names_the_list_and_what_each_keeps() -> None:
    ((_, line, message),) = _run(validation_losses_appended_in_train_mode, DEVICE)
    assert message.startswith(
        f"`losses.append(F.mse_loss(model(x), y))` (test_graph_kept.py:{line}): losses kept a "
        "tensor that carries autograd history each iteration, and no backward() went through "
        "them: each kept its graph (about "
    )
    assert "of saved activations) alive until they were dropped" in message
    assert "`torch.no_grad()`" in message


def epoch_means_of_a_kept_total(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    history = []
    for _ in range(5):
        total = 0
        for x, y in batches[:4]:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss  # kept
        history.append(total / 4)  # kept
    print(len(history))


def epoch_means_of_a_number_total(device: torch.device) -> None:
    model, optimizer, batches = _setup(device)
    history, running = [], 0.0
    for _ in range(5):
        total = 0.0
        for x, y in batches[:4]:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
            running = 0.9 * running + 0.1 * loss.item()
        history.append(torch.tensor(total / 4))
    print(len(history), running)


def test_a_list_of_values_made_of_a_kept_total_points_to_the_total() -> None:
    """``total += loss`` each batch and ``history.append(total / 4)`` each epoch: the list keeps
    graphs because the total does; its finding says so, and that fixing the total's line fixes
    it, rather than giving a fix of its own that leaves each epoch's graphs growing."""
    found = _run(epoch_means_of_a_kept_total, DEVICE)
    total_line = _line(Path(__file__), "total += loss  # kept")
    append_line = _line(Path(__file__), "history.append(total / 4)  # kept")
    assert {line for _, line, _ in found} == {total_line, append_line}
    (appended,) = [message for _, line, message in found if line == append_line]
    assert appended.endswith(
        f"They are made of total, which accumulates tensors with history at "
        f"test_graph_kept.py:{total_line} (reported there): accumulating numbers there "
        "(`.item()`) fixes this line too."
    )
    (total,) = [message for _, line, message in found if line == total_line]
    assert "`total += loss.item()`" in total
    assert _run(epoch_means_of_a_number_total, DEVICE) == []


def test_on_the_standin_accelerator() -> None:
    device = accelerator_device()
    for program in LEAKS:
        assert {line for _, line, _ in _run(program, device)} == _marked_lines(program)
    for program in CLEAN:
        assert _run(program, device) == []


def test_nothing_is_kept_alive() -> None:
    import gc
    import weakref

    model, _, batches = _setup()
    with tensor_dap.watch(rules=["graph-kept"]):
        total = 0
        for x, y in batches:
            total = total + F.mse_loss(model(x), y)
        ref = weakref.ref(total)
        del total
        gc.collect()
        assert ref() is None


def test_totals_no_backward_went_through_are_reported_when_dropped_and_at_the_end(
    check, engine_path
) -> None:  # type: ignore[no-untyped-def]
    """Through ``tensor-dap check``: the function's total when the function returns, the
    module-level total (alive until the program ends) at the end; the program's own output
    and exit are as without tensor-dap."""
    run = check(LAST_EVALUATION, extra=("--rules", "graph-kept"), env=engine_path)
    inside = _line(LAST_EVALUATION, "total += F.mse_loss")
    module_level = _line(LAST_EVALUATION, "final = final + F.l1_loss")
    assert run.pairs() == {("graph-kept", inside), ("graph-kept", module_level)}, run.stderr
    by_line = {f["line"]: f["message"] for f in run.findings}
    assert by_line[inside].startswith(
        f"`total += F.mse_loss(model(x), y)` (last_evaluation.py:{inside}): total accumulated "
        "F.mse_loss(model(x), y), which carries autograd history, over 5 iterations, and no "
        "backward() went through it"
    )
    assert "alive until it was dropped" in by_line[inside]
    assert "alive until the program ended" in by_line[module_level]
    assert "torch.no_grad()" in by_line[module_level]
    assert run.stdout.startswith("test loss ") and "final error " in run.stdout


def test_looking_at_the_accumulating_frame_keeps_none_of_its_values_alive() -> None:
    """graph-kept looks at the accumulating frame's modules (is the model in eval mode?): on
    Python 3.11 and 3.12 reading ``f_locals`` keeps that moment's locals alive until the frame
    returns (here: one iteration's batch), unless the copy is let go."""
    import weakref

    model, _, _ = _setup()
    batches = []
    with tensor_dap.watch(rules=["graph-kept"]):
        total = 0
        for _ in range(4):
            batch = torch.randn(8, 6)
            batches.append(weakref.ref(batch))
            total = total + F.mse_loss(model(batch.detach().clone()), torch.zeros(8, 1))
        del batch
        kept = [ref() is not None for ref in batches]
    assert total.grad_fn is not None
    assert kept == [False, False, False, False]


@pytest.mark.parametrize("program_ends_there", [False, True])
def test_losses_a_failed_backward_was_for_are_not_judged(program_ends_there: bool) -> None:
    """Validation-style losses kept in a list, then a backward() that raises before it reaches
    them (an in-place op broke the graph above them): whether a backward would have gone
    through them cannot be known, so neither their drop nor the program's end reports them."""
    model, _, batches = _setup()
    with tensor_dap.watch(rules=["graph-kept"]) as watch:
        losses = []
        for x, y in batches:
            losses.append(F.mse_loss(model(x), y))
        scaled = torch.stack(losses).exp()
        scaled.add_(1)  # exp saved its result: backward() raises at its node
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            scaled.sum().backward()
        if program_ends_there:
            reports = watch._modules["graph-kept"].finish(watch)
        else:
            del losses, scaled
            reports = []
    assert watch.findings == [] and reports == []


def test_an_evaluation_through_a_shared_helper_is_reported_at_the_call(check) -> None:  # noqa: ANN001
    """A neural ODE's hand-written RK4 solver appends each state to its own list; training
    calls it, and so does an evaluation in eval mode without ``torch.no_grad()`` whose
    trajectories the program keeps. The helper's list is temporary and training needs it:
    the finding is at the evaluation's call, with ``no_grad`` there as the fix."""
    script = Path(__file__).parent / "leak_programs" / "neural_ode_eval.py"
    run = check(script, rules="graph-kept")
    call = next(i for i, t in enumerate(script.read_text().splitlines(), 1) if "full = rk4(" in t)
    assert run.pairs() == {("graph-kept", call)}, run.stderr
    message = run.finding("graph-kept")["message"]
    assert message.startswith("`full = rk4(func, y0_true, T)`: rk4() runs here with gradients")
    assert "its list ys holds (neural_ode_eval.py:" in message
    assert "Call rk4() under `torch.no_grad()` here" in message


def _line_of(script: Path, text: str) -> int:
    return next(i for i, t in enumerate(script.read_text().splitlines(), 1) if text in t)


def test_a_loss_logged_one_call_below_the_loop_is_reported_where_it_is_logged(check) -> None:  # noqa: ANN001
    """The loop calling backward() holds the list only as ``module.logged`` (a trainer's
    ``fit``) or as a module's global; the line keeping the loss is in the ``training_step``
    it calls: that line is reported, naming the list as it is written there."""
    here = Path(__file__).parent / "leak_programs"
    trainer = here / "trainer_logs_in_training_step.py"
    run = check(trainer, rules="graph-kept")
    logged = _line_of(trainer, 'self.log("train/loss"')
    assert run.pairs() == {("graph-kept", logged)}, run.stderr
    message = run.finding("graph-kept")["message"]
    assert message.startswith('`self.log("train/loss", loss.item() if FIXED else loss)`: ')
    assert "self.logged['train/loss'] keeps " in message
    assert check(trainer, "fixed", rules="graph-kept").pairs() == set()
    # (the backward() of `loss / 2`, gradient accumulation: the list keeps the loss it scaled)
    accumulating = check(trainer, "accumulate", rules="graph-kept")
    assert accumulating.pairs() == {("graph-kept", logged)}, accumulating.stderr
    assert check(trainer, "fixed", "accumulate", rules="graph-kept").pairs() == set()
    script = here / "training_step_function_logs.py"
    run = check(script, rules="graph-kept")
    assert run.pairs() == {("graph-kept", _line_of(script, 'log("loss", loss)'))}, run.stderr
    assert 'Keep a number or a detached tensor: `log("loss", loss.item())`' in run.stderr


def test_steps_collected_before_a_program_raised_are_no_finding(check) -> None:  # noqa: ANN001
    """A seq2seq forward's ``outputs[t] = output`` holds every step's graph for the loss; the
    program raised before its ``loss.backward()``: nothing says the graph was kept for
    nothing (told to detach there, the model would not train), and the program's own error
    is the end of the run as without the tool. When it trains, nothing either."""
    script = Path(__file__).parent / "leak_programs" / "seq2seq_raises_before_backward.py"
    for where in ((), ("in_function",)):  # (at the end; freed as the error unwinds a function)
        raised = check(script, "raise", *where, rules="graph-kept")
        assert raised.returncode == 1 and "RuntimeError" in raised.stderr, raised.stderr
        assert raised.pairs() == set(), raised.stderr
        assert check(script, *where, rules="graph-kept").pairs() == set()


def test_a_process_the_program_started_that_raised_reports_no_collected_steps(
    check,  # noqa: ANN001
) -> None:
    """As above in a process the run starts (``check -- python prog.py``, a launcher's child):
    its agent learns the program raised from Python itself, before its exit handlers report
    what the graphs kept; a total kept with its graph is still a finding there."""
    here = Path(__file__).parent / "leak_programs"
    script = here / "seq2seq_raises_before_backward.py"
    for where in ((), ("in_function",)):
        raised = check(script, "raise", *where, rules="graph-kept", extra=("--", sys.executable))
        assert raised.returncode == 1 and "RuntimeError" in raised.stderr, raised.stderr
        assert raised.pairs() == set(), raised.stderr
    script = here / "eval_total_then_unrelated_crash.py"
    run = check(script, rules="graph-kept", extra=("--", sys.executable))
    assert run.returncode == 1 and "FileNotFoundError" in run.stderr
    assert run.pairs() == {("graph-kept", _line_of(script, "total += model(x)"))}, run.stderr


def test_a_loss_logged_through_a_helper_of_the_logging_helper_is_reported_at_its_call(
    check,  # noqa: ANN001
) -> None:
    """``training_step`` calls ``self.log_dict({...})``, whose loop calls ``self.log``, which
    appends to ``self._logged[name]``: reported at the ``log_dict`` call (not at the trainer's
    ``model.to(self.device)``, a method of torch's that never takes the loss)."""
    script = Path(__file__).parent / "leak_programs" / "trainer_logs_through_log_dict.py"
    run = check(script, rules="graph-kept")
    logged = _line_of(script, "self.log_dict({")
    assert run.pairs() == {("graph-kept", logged)}, run.stderr
    message = run.finding("graph-kept")["message"]
    assert message.startswith('`self.log_dict({"train_loss": loss.item() if FIXED else loss})`')
    assert "self._logged['train_loss'] keeps " in message
    assert check(script, "fixed", rules="graph-kept").pairs() == set()


def test_a_total_is_still_reported_when_the_program_fails_after_it(check) -> None:  # noqa: ANN001
    """Only a buffer written step by step is let go when the program raises (its loss's
    backward() may be what it missed): a total kept with its graph is a finding still."""
    script = Path(__file__).parent / "leak_programs" / "eval_total_then_unrelated_crash.py"
    run = check(script, rules="graph-kept")
    assert run.returncode == 1 and "FileNotFoundError" in run.stderr
    assert run.pairs() == {("graph-kept", _line_of(script, "total += model(x)"))}, run.stderr


def test_a_trackers_own_step_method_keeping_losses_is_reported(check) -> None:  # noqa: ANN001
    """``meter.step(loss)`` appending each loss: a method named as torch's are, of the
    program's own class, is the call handing it the loss."""
    script = Path(__file__).parent / "leak_programs" / "tracker_with_a_step_method.py"
    run = check(script, rules="graph-kept")
    assert run.pairs() == {("graph-kept", _line_of(script, "meter.step(loss)"))}, run.stderr


def test_a_module_keeping_its_losses_is_reported_where_it_appends(check) -> None:  # noqa: ANN001
    """``self.train_losses.append(loss)`` in the ``training_step`` of a module the script's
    ``fit()`` names as a global."""
    script = Path(__file__).parent / "leak_programs" / "module_keeps_losses_in_training_step.py"
    run = check(script, rules="graph-kept")
    line = _line_of(script, "self.train_losses.append(loss)")
    assert run.pairs() == {("graph-kept", line)}, run.stderr


def test_a_loss_handed_to_a_modules_logging_method_is_reported_at_that_call(check) -> None:  # noqa: ANN001
    """``model.log(loss)``, not another call on the module (``model.lin(x)``)."""
    script = Path(__file__).parent / "leak_programs" / "module_method_logs_the_loss.py"
    run = check(script, rules="graph-kept")
    assert run.pairs() == {("graph-kept", _line_of(script, "model.log(loss)"))}, run.stderr
