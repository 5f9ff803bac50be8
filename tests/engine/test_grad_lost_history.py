"""``grad-lost`` names where the history was cut whatever the model's depth, through list
arguments (``torch.cat``, ``torch.stack``, ``torch.tensor(list)``), under a ``no_grad`` block or
decorator (naming that line), and says honestly when it cannot follow the history."""

from __future__ import annotations

import copy
import inspect
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

import tensor_dap
from tensor_dap.testing import accelerator_device


def _line_of(function, text: str) -> int:  # noqa: ANN001
    lines, first = inspect.getsourcelines(function)
    return next(first + i for i, line in enumerate(lines) if text in line)


def _grad_lost(run, *args) -> list[tuple[int, str]]:  # noqa: ANN001
    with tensor_dap.watch(rules=["grad-lost"]) as watch:
        try:
            run(*args)
        except RuntimeError as error:
            assert "does not require grad" in str(error)
    return [(f.line, f.message) for f in watch.findings if f.rule == "grad-lost"]


def thresholded_classifier(device: torch.device, layers: int) -> None:
    torch.manual_seed(0)
    sizes = [4] + [8] * (layers - 1) + [1]
    blocks: list[nn.Module] = []
    for size_in, size_out in zip(sizes, sizes[1:]):
        blocks += [nn.Linear(size_in, size_out), nn.ReLU()]
    model = nn.Sequential(*blocks[:-1]).to(device)
    x = torch.randn(16, 4, device=device)
    y = (x.sum(1, keepdim=True) > 0).float()
    out = torch.sigmoid(model(x))
    pred = (out > 0.5).float()
    loss = F.binary_cross_entropy(pred, y)
    loss.backward()


@pytest.mark.parametrize("device", ["cpu", "accel"])
@pytest.mark.parametrize("layers", [2, 4, 8])
def test_the_cut_is_named_whatever_the_depth(layers: int, device: str) -> None:
    where = accelerator_device() if device == "accel" else torch.device("cpu")
    ((line, message),) = _grad_lost(thresholded_classifier, where, layers)
    assert line == _line_of(thresholded_classifier, "loss.backward()")
    cut = _line_of(thresholded_classifier, "pred = (out > 0.5).float()")
    assert f"cut at test_grad_lost_history.py:{cut} `pred = (out > 0.5).float()`" in message
    assert "by gt(), which has no gradient" in message


def cut_behind_cat() -> None:
    w = torch.randn(3, requires_grad=True)
    pieces = [(w[i] * 2).detach() for i in range(3)]
    h = torch.cat([p.unsqueeze(0) for p in pieces])
    loss = (h * h).sum()
    loss.backward()


def cut_behind_stack_of_many() -> None:
    """More pieces than a line's runs the engine follows in full: the sampled ones tell."""
    w = torch.randn(40, requires_grad=True)
    outputs = []
    for i in range(40):
        outputs.append(torch.tanh(w[i]).detach())
    loss = torch.stack(outputs).sum()
    loss.backward()


def cut_by_rewrapping_a_list() -> None:
    w = torch.randn(3, requires_grad=True)
    v = torch.tensor([w[0] * 2, w[1]])
    loss = (v * 3).sum()
    loss.backward()


def loss_from_numbers_read_with_item() -> None:
    model = nn.Linear(4, 1)
    batch_losses = []
    for _ in range(3):
        batch_losses.append(F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).item())
    loss = torch.tensor(batch_losses).mean()
    loss.backward()


@pytest.mark.parametrize(
    ("program", "cut_text", "how"),
    [
        (
            loss_from_numbers_read_with_item,
            "batch_losses.append(F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).item())",
            "by .item(), whose Python number keeps no gradient history",
        ),
        (cut_behind_cat, "pieces = [(w[i] * 2).detach()", "by detach()"),
        (cut_behind_stack_of_many, "outputs.append(torch.tanh(w[i]).detach())", "by detach()"),
        (cut_by_rewrapping_a_list, "v = torch.tensor([w[0] * 2, w[1]])", "re-wrapping"),
    ],
)
def test_a_cut_behind_a_list_argument_is_named(program, cut_text: str, how: str) -> None:  # noqa: ANN001
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.tensor(list of tensors) warns
        ((_, message),) = _grad_lost(program)
    assert f":{_line_of(program, cut_text)} `{cut_text}" in message
    assert how in message
    assert "nothing it was computed from requires grad" not in message


def test_a_list_rewrapped_by_torch_tensor_is_told_to_use_torch_stack() -> None:
    """``torch.tensor([w[0] * 2, w[1]])``: the fix is ``torch.stack`` of the same list."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.tensor(list of tensors) warns
        ((_, message),) = _grad_lost(cut_by_rewrapping_a_list)
    assert message.endswith(
        "by torch.tensor(...) re-wrapping of a list. Build it with "
        "`torch.stack([w[0] * 2, w[1]])` there: torch.tensor(...) copies the values into a new "
        "tensor without history, torch.stack keeps each one's graph."
    ), message


def joint_losses_rewrapped_with_requires_grad() -> None:
    """Multi-task weighting written ``torch.tensor(task_losses, requires_grad=True)``: the loss
    has a grad_fn, backward() runs, and the model's parameters get no gradient."""
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    weights = torch.tensor([1.0, 0.5])
    for _ in range(3):
        out = model(torch.randn(8, 4))
        task_losses = [out[:, 0].pow(2).mean(), out[:, 1].abs().mean()]
        loss = (torch.tensor(task_losses, requires_grad=True) * weights).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_parameters_cut_off_by_a_rewrapped_list_are_told_to_use_torch_stack() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = _grad_lost(joint_losses_rewrapped_with_requires_grad)
    assert found
    line, message = found[0]
    assert line == _line_of(joint_losses_rewrapped_with_requires_grad, "optimizer.step()")
    assert "by torch.tensor(...) re-wrapping" in message
    assert message.endswith(
        "Build it with `torch.stack(task_losses)` there: torch.tensor(...) copies the values "
        "into a new tensor without history, torch.stack keeps each one's graph."
    ), message


def one_loss_rewrapped_with_requires_grad() -> None:
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        l2 = model(torch.randn(8, 4)).pow(2).mean()
        total = torch.tensor(l2, requires_grad=True) * 2
        optimizer.zero_grad()
        total.backward()
        optimizer.step()


def test_one_tensor_rewrapped_is_told_to_use_it_not_to_stack_it() -> None:
    """``torch.tensor(l2, requires_grad=True)`` of one tensor: ``torch.stack(l2)`` would raise
    for a 0-d tensor; the tensor itself is the fix."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = _grad_lost(one_loss_rewrapped_with_requires_grad)
    assert found
    _, message = found[0]
    assert "torch.stack" not in message, message
    assert "Use `l2` itself there" in message, message


def test_numbers_rewrapped_by_torch_tensor_are_not_told_to_stack() -> None:
    """``torch.tensor(batch_losses)`` of ``.item()`` numbers: stacking numbers keeps nothing."""
    ((_, message),) = _grad_lost(loss_from_numbers_read_with_item)
    assert "torch.stack" not in message


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x)


def loss_through_a_no_grad_helper() -> None:
    model = nn.Linear(4, 1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    loss = F.mse_loss(predict(model, x), y)
    loss.backward()


def loss_in_a_no_grad_block() -> None:
    model = nn.Linear(4, 1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    with torch.no_grad():
        pred = model(x)
    loss = F.mse_loss(pred, y)
    loss.backward()


def test_a_no_grad_decorator_is_named_as_the_cut() -> None:
    ((_, message),) = _grad_lost(loss_through_a_no_grad_helper)
    decorator = _line_of(predict, "@torch.no_grad()")
    assert f"cut at test_grad_lost_history.py:{decorator} `@torch.no_grad()`" in message
    assert f":{_line_of(predict, 'return model(x)')} `return model(x)`" in message
    assert "requires_grad=True" not in message


def test_a_no_grad_block_is_named_as_the_cut() -> None:
    ((_, message),) = _grad_lost(loss_in_a_no_grad_block)
    block = _line_of(loss_in_a_no_grad_block, "with torch.no_grad():")
    assert f"cut at test_grad_lost_history.py:{block} `with torch.no_grad():`" in message
    assert "Compute loss outside that block" in message


def distillation_with_the_student_in_the_teachers_block() -> None:
    """The student's forward indented into the teacher's ``no_grad`` block, after the teacher
    was evaluated over the data (the Linear call site is sampled by then: the student's output
    has no record of its own)."""
    teacher, student = nn.Linear(6, 3), nn.Linear(6, 3)
    with torch.no_grad():  # evaluation: torch's Linear call site runs 7 of its 8 samples
        for _ in range(7):
            teacher(torch.randn(8, 6)).argmax(1)
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    with torch.no_grad():
        teacher_logits = teacher(x)
        student_logits = student(x)
    soft = F.kl_div(F.log_softmax(student_logits, 1), F.softmax(teacher_logits, 1))
    loss = soft + F.cross_entropy(student_logits, y)
    loss.backward()


def test_a_no_grad_blocks_other_lines_are_named_too() -> None:
    """Which line of the block should have trained is the user's call: the message names the
    block's lines, the student's among them, whichever the history was followed to."""
    ((_, message),) = _grad_lost(distillation_with_the_student_in_the_teachers_block)
    program = distillation_with_the_student_in_the_teachers_block
    student = _line_of(program, "student_logits = student(x)")
    assert f"test_grad_lost_history.py:{student} `student_logits = student(x)`" in message
    assert "Compute loss outside that block" in message


def chain_through_a_hot_line() -> None:
    w = torch.randn(3, requires_grad=True)
    z = w.detach()
    for _ in range(100):
        z = z + 1
    loss = z.sum()
    loss.backward()


def test_a_history_that_cannot_be_followed_is_not_called_unknown_or_grad_free() -> None:
    """The 100th run of ``z = z + 1`` is not sampled: say so, never "nothing requires grad"."""
    ((_, message),) = _grad_lost(chain_through_a_hot_line)
    assert "nothing it was computed from requires grad" not in message
    assert f":{_line_of(chain_through_a_hot_line, 'loss = z.sum()')} `loss = z.sum()`" in message
    assert "Look upstream" in message


def test_parameters_without_gradient_at_step_are_all_counted_in_the_message() -> None:
    """Six parameters lose their gradient (the body's output is detached): four are named, the
    message says how many more there are."""
    torch.manual_seed(0)
    body = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8))
    head = nn.Linear(8, 1)
    optimizer = torch.optim.SGD([*body.parameters(), *head.parameters()], lr=0.1)
    with tensor_dap.watch(rules=["grad-lost"]) as watch:
        for _ in range(2):
            optimizer.zero_grad()
            features = body(torch.randn(16, 4)).detach()
            head(features).pow(2).mean().backward()
            optimizer.step()
    messages = [f.message for f in watch.findings]
    assert messages, "the step with six parameters without gradient was not reported"
    assert "6 parameter(s) took part in this step's forward but got no gradient" in messages[0]
    assert "and 2 more" in messages[0]


def _step_findings(train) -> list[str]:  # noqa: ANN001
    with tensor_dap.watch(rules=["grad-lost"]) as watch:
        train()
    return [f.message for f in watch.findings if f.rule == "grad-lost"]


class _Heads(nn.Module):
    """A shared body and four heads: the multiple-hypothesis and multi-task shape."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 16), nn.ReLU())
        self.heads = nn.ModuleList([nn.Linear(16, 2) for _ in range(4)])

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        h = self.body(x)
        return [head(h) for head in self.heads]


def winner_takes_all() -> None:
    torch.manual_seed(0)
    model = _Heads()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        x, y = torch.randn(8, 4), torch.randn(8, 2)
        losses = [F.mse_loss(p, y) for p in model(x)]
        best = min(range(4), key=lambda k: losses[k].item())
        optimizer.zero_grad()
        losses[best].backward()
        optimizer.step()


def tasks_without_labels_this_batch() -> None:
    torch.manual_seed(0)
    model = _Heads()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(4):
        x = torch.randn(8, 4)
        outputs = model(x)
        loss = F.mse_loss(outputs[0], torch.randn(8, 2))
        if step % 2:  # the other tasks have targets every other batch
            for out in outputs[1:]:
                loss = loss + F.mse_loss(out, torch.randn(8, 2))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def encoder_output_left_unused() -> None:
    """A model that returns (logits, pooled) where training uses the logits only (a pooler,
    an auxiliary head): those parameters get no gradient, but nothing was cut."""
    torch.manual_seed(0)
    model = _Heads()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        logits = model(torch.randn(8, 4))[0]
        optimizer.zero_grad()
        logits.pow(2).mean().backward()
        optimizer.step()


#: batches the watch never saw made (a DataLoader's worker processes make them)
_UNSEEN_BATCHES = [torch.randn(8, 4) for _ in range(3)]


def unseen_batches_and_logged_losses() -> None:
    """Batches without provenance enter the forward after the last step logged ``loss.item()``:
    no cut of this step's forward."""
    torch.manual_seed(0)
    model = _Heads()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in _UNSEEN_BATCHES:
        loss = model(x)[0].pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"loss {loss.item():.3f}")


_UNSEEN_TARGETS = [torch.randint(0, 2, (8,)) for _ in range(3)]


def predictions_logged_through_numpy_before_the_loss() -> None:
    """``preds = out.detach().cpu().numpy()`` for logging, then the loss with a target the
    watch never saw made (a DataLoader worker's): the unused heads are no cut."""
    torch.manual_seed(0)
    model = _Heads()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    logged = []
    for x, y in zip(_UNSEEN_BATCHES, _UNSEEN_TARGETS):
        optimizer.zero_grad()
        out = model(x)[0]
        logged.append(out.detach().cpu().numpy())
        F.cross_entropy(out, y).backward()
        optimizer.step()


class _Student(nn.Module):
    """A backbone with a classifier and an auxiliary head this training does not use."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(4, 16), nn.ReLU())
        self.classifier = nn.Linear(16, 3)
        self.aux_head = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.backbone(x)
        return self.classifier(h), self.aux_head(h)


def distillation_with_an_unused_head() -> None:
    """Knowledge distillation: the teacher's logits are detached (a cut that goes on into the
    loss) while the student's auxiliary head is left out of the loss: the cut is the teacher's
    history, not the head's."""
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 3))
    student = _Student()
    optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(8, 4)
        logits, _aux = student(x)
        target = teacher(x).detach()
        loss = F.kl_div(F.log_softmax(logits, -1), F.softmax(target, -1), reduction="batchmean")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def pseudo_labels_under_no_grad_with_an_unused_head() -> None:
    """FixMatch's shape after model.eval() switched the sampling on afresh: pseudo-labels from
    a weakly augmented view under ``no_grad`` (a cut that goes on into the loss), the
    student's auxiliary head left out of the loss."""
    torch.manual_seed(0)
    student = _Student()
    optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(8, 4)
        student.eval()
        with torch.no_grad():
            weak_logits, _ = student(x + 0.01 * torch.randn(8, 4))
            probs = weak_logits.softmax(-1)
        student.train()
        logits, _aux = student(x)
        loss = -(probs * F.log_softmax(logits, -1)).sum(-1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def greedy_decoding_with_an_unused_head() -> None:
    """Each step feeds back ``argmax`` of its logits (a cut: argmax has no gradient) while a
    head applied to the encoder's state is left out of the loss."""
    torch.manual_seed(0)
    embed, cell, out = nn.Embedding(5, 8), nn.GRUCell(8, 8), nn.Linear(8, 5)
    encoder, unused = nn.Linear(4, 8), nn.Linear(8, 2)
    modules = [embed, cell, out, encoder, unused]
    optimizer = torch.optim.Adam([p for m in modules for p in m.parameters()], lr=1e-3)
    for _ in range(3):
        h = torch.tanh(encoder(torch.randn(2, 4)))
        unused(h)
        token, loss = torch.zeros(2, dtype=torch.long), torch.zeros(())
        for _t in range(3):
            h = cell(embed(token), h)
            logits = out(h)
            loss = loss + F.cross_entropy(logits, torch.randint(0, 5, (2,)))
            token = logits.argmax(-1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@pytest.mark.parametrize(
    "train",
    [
        distillation_with_an_unused_head,
        pseudo_labels_under_no_grad_with_an_unused_head,
        greedy_decoding_with_an_unused_head,
        predictions_logged_through_numpy_before_the_loss,
        winner_takes_all,
        tasks_without_labels_this_batch,
        encoder_output_left_unused,
        unseen_batches_and_logged_losses,
    ],
)
def test_heads_left_out_of_the_loss_are_not_a_cut_history(train) -> None:  # noqa: ANN001
    assert _step_findings(train) == []


class _NumpyInForward(nn.Module):
    def __init__(self, rewrap: str) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 1)
        self.rewrap = rewrap

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.fc1(x))
        array = h.detach().numpy()  # a NumPy step in the middle of the forward
        if self.rewrap == "from_numpy":
            h = torch.from_numpy(array)
        elif self.rewrap == "clip_then_from_numpy":  # a new array: the memory is not followed
            h = torch.from_numpy(np.clip(array, -0.5, 0.5)).to(x.device)
        elif self.rewrap == "clip_then_from_numpy_then_activations":  # the next block opens
            h = torch.from_numpy(np.clip(array, -0.5, 0.5)).to(x.device)  # with an activation
            h = F.relu(torch.tanh(h))
        elif self.rewrap == "clip_then_as_tensor":
            h = torch.as_tensor(np.clip(array, -0.5, 0.5))
        elif self.rewrap == "as_tensor":
            h = torch.as_tensor(array)
        else:
            h = torch.tensor(h.detach().tolist())
        return self.fc2(h)


@pytest.mark.parametrize(
    "rewrap",
    [
        "from_numpy",
        "clip_then_from_numpy",
        "clip_then_from_numpy_then_activations",
        "as_tensor",
        "clip_then_as_tensor",
        "tolist",
    ],
)
def test_a_cut_through_numpy_or_python_lists_is_named_at_the_step(rewrap: str) -> None:
    def train() -> None:
        torch.manual_seed(0)
        model = _NumpyInForward(rewrap)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            optimizer.zero_grad()
            model(torch.randn(16, 4)).pow(2).mean().backward()
            optimizer.step()

    messages = _step_findings(train)
    assert messages, f"fc1 lost its gradient through {rewrap} and nothing was reported"
    line = _line_of(_NumpyInForward.forward, "array = h.detach().numpy()")
    named = _line_of(_NumpyInForward.forward, "h = torch.tensor(h.detach().tolist())")
    cut_line = named if rewrap == "tolist" else line
    assert "2 parameter(s) took part in this step's forward but got no gradient" in messages[0]
    assert f"cut after that use, at test_grad_lost_history.py:{cut_line}" in messages[0]


class _Encoder(nn.Module):
    """Initialised the way Transformers code does (``weight.data.normal_()``), with an embedding
    and a LayerNorm, and a layer defined but never called (kept for old checkpoints)."""

    def __init__(self, cut: bool) -> None:
        super().__init__()
        self.embedding = nn.Embedding(20, 8)
        self.norm = nn.LayerNorm(8)
        self.legacy = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)
        self.cut = cut
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.embedding(ids))
        if self.cut:
            h = h.detach()
        return self.head(h.mean(1))


def _train_encoder(cut: bool) -> None:
    torch.manual_seed(0)
    model = _Encoder(cut)
    teacher = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        ids = torch.randint(0, 20, (4, 5))
        target = teacher(torch.randn(4, 8)).detach()  # a detached target rejoins the graph
        loss = F.mse_loss(model(ids), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_the_use_named_is_the_forward_one_and_norm_layers_count() -> None:
    """The init's ``.data`` is not the use named; LayerNorm's weight and bias (handed to the
    mode as keywords) are counted."""
    (message, *_) = _step_findings(lambda: _train_encoder(cut=True))
    forward_line = _line_of(_Encoder.forward, "h = self.norm(self.embedding(ids))")
    assert "3 parameter(s) took part in this step's forward" in message
    assert f"(used at test_grad_lost_history.py:{forward_line} by embedding)" in message
    assert f"(used at test_grad_lost_history.py:{forward_line} by layer_norm)" in message
    assert "legacy" not in message


def test_a_layer_never_called_is_not_reported_when_another_cut_rejoins() -> None:
    """``legacy`` was only written by the init's ``.data``: it took no part in the forward."""
    assert _step_findings(lambda: _train_encoder(cut=False)) == []


@pytest.mark.parametrize("cell", [nn.GRU, nn.LSTM, nn.RNN])
def test_recurrent_layers_handing_torch_their_weights_as_a_list_are_counted(cell) -> None:  # noqa: ANN001
    """A tied-embedding language model whose recurrent body's output is detached before the
    projection: the embedding still trains (through the projection), the body does not."""

    def train() -> None:
        torch.manual_seed(0)
        embedding, body = nn.Embedding(20, 16), cell(16, 16, batch_first=True)
        optimizer = torch.optim.Adam([*embedding.parameters(), *body.parameters()], lr=1e-2)
        tokens = torch.randint(0, 20, (4, 10))
        for _ in range(2):
            hidden, _ = body(embedding(tokens))
            logits = F.linear(hidden.detach(), embedding.weight)
            loss = F.cross_entropy(logits.reshape(-1, 20), tokens.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    (message, *_) = _step_findings(train)
    assert "4 parameter(s) took part in this step's forward but got no gradient" in message
    assert "body.weight_ih_l0 (" in message
    assert "logits = F.linear(hidden.detach(), embedding.weight)` by detach()" in message


class ndarray:  # noqa: N801  (named as cupy's array class is, without NumPy's interface)
    def __init__(self, values: list[float]) -> None:
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, index: int) -> float:
        return self.values[index]


def test_an_array_class_without_numpys_interface_is_no_internal_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with tensor_dap.watch(rules=["grad-lost"]) as watch:
        made = torch.as_tensor(ndarray([0.0, 1.0]))
    assert made.tolist() == [0.0, 1.0]
    assert watch.failed == {}
    assert not [r for r in caplog.records if "internal error" in r.getMessage()]


def distillation_with_a_cut_student() -> None:
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 3))
    backbone, classifier = nn.Sequential(nn.Linear(4, 16), nn.ReLU()), nn.Linear(16, 3)
    aux_head = nn.Linear(4, 3)
    params = [*backbone.parameters(), *classifier.parameters(), *aux_head.parameters()]
    optimizer = torch.optim.SGD(params, lr=0.1)
    for _ in range(2):
        x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
        features = backbone(x)
        target = teacher(x).detach()
        aux = F.mse_loss(aux_head(x), target)
        logits = classifier(features.detach())  # the bug: the backbone gets no gradient
        loss = F.cross_entropy(logits, y) + aux
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_the_cut_named_is_the_one_the_parameter_fed_not_a_later_unrelated_one() -> None:
    """Two cuts rejoin the graph after the backbone's use: the teacher's target first, then the
    student's own ``detach()``; the backbone fed only the second, which is the one named."""
    (message,) = _step_findings(distillation_with_a_cut_student)
    cut = _line_of(distillation_with_a_cut_student, "logits = classifier(features.detach())")
    target = _line_of(distillation_with_a_cut_student, "target = teacher(x).detach()")
    assert "2 parameter(s) took part in this step's forward but got no gradient" in message
    assert f"test_grad_lost_history.py:{cut}" in message
    assert f"test_grad_lost_history.py:{target}" not in message


class _VectorQuantizer(nn.Module):
    """The VQ-VAE layer of the Sonnet / Zalando notebook, the straight-through estimator
    applied before the codebook loss (the bug: the codebook gets no gradient)."""

    def __init__(self) -> None:
        super().__init__()
        self.codebook = nn.Embedding(8, 4)

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        distances = (z**2).sum(1, keepdim=True) - 2 * z @ self.codebook.weight.t()
        codes = torch.argmin(distances, dim=1)
        quantized = self.codebook(codes)
        quantized = z + (quantized - z).detach()
        codebook_loss = F.mse_loss(quantized, z.detach())
        return quantized, codebook_loss


def straight_through_before_the_codebook_loss() -> None:
    torch.manual_seed(0)
    encoder, quantizer, decoder = nn.Linear(6, 4), _VectorQuantizer(), nn.Linear(4, 6)
    params = [*encoder.parameters(), *quantizer.parameters(), *decoder.parameters()]
    optimizer = torch.optim.Adam(params, lr=1e-3)
    for _ in range(2):
        x = torch.randn(16, 6)
        quantized, codebook_loss = quantizer(encoder(x))
        loss = F.mse_loss(decoder(quantized), x) + codebook_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_a_written_cut_is_named_before_an_op_without_gradient() -> None:
    """The codebook feeds the distances, whose ``argmin`` (no gradient: every VQ layer has it)
    rejoins first, and the codes' lookup, whose ``.detach()`` is the bug: that one is named."""
    (message,) = _step_findings(straight_through_before_the_codebook_loss)
    assert "quantizer.codebook.weight (8, 4)" in message
    assert "`quantized = z + (quantized - z).detach()` by detach()" in message
    assert "argmin" not in message


def message_passing_with_a_detached_embedding() -> None:
    """A GNN layer aggregating with ``scatter_add`` over an index expanded to the messages'
    shape (``dst.unsqueeze(-1).expand_as(messages)``: their shape, not their history), the
    node embeddings detached before the classifier (the bug)."""
    torch.manual_seed(0)
    layer, update, classifier = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 2)
    params = [*layer.parameters(), *update.parameters(), *classifier.parameters()]
    optimizer = torch.optim.SGD(params, lr=0.1)
    src, dst = torch.randint(0, 10, (30,)), torch.randint(0, 10, (30,))
    for _ in range(2):
        x, y = torch.randn(10, 4), torch.randint(0, 2, (10,))
        messages = layer(x)[src]
        index = dst.unsqueeze(-1).expand_as(messages)
        aggregated = torch.zeros(10, 8).scatter_add(0, index, messages)
        embedding = torch.relu(update(aggregated))
        loss = F.cross_entropy(classifier(embedding.detach()), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_an_index_shaped_like_the_messages_is_no_cut() -> None:
    (message,) = _step_findings(message_passing_with_a_detached_embedding)
    assert "`loss = F.cross_entropy(classifier(embedding.detach()), y)` by detach()" in message
    assert "expand_as" not in message


def loss_remade_as_a_leaf() -> None:
    """A loss re-made from its number with ``requires_grad=True`` (so backward() runs): no
    error, no parameter gets a gradient, nothing trains."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
    for _ in range(3):
        loss = F.cross_entropy(model(x), y)
        loss = torch.tensor(loss.item(), requires_grad=True)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert model.weight.grad is None


def leaves_of_their_own() -> None:
    """Backward from leaves made of plain data (autograd's tutorial): not a cut history."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    w.backward(torch.ones(2))
    x = torch.tensor(3.0, requires_grad=True)
    (x * x).backward()
    assert float(x.grad) == 6.0


def test_a_loss_remade_as_a_new_leaf_is_reported() -> None:
    ((line, message),) = set(_grad_lost(loss_remade_as_a_leaf))
    assert line == _line_of(loss_remade_as_a_leaf, "loss.backward()")
    assert message.startswith("`loss.backward()`: loss is a new leaf tensor (made at ")
    assert "backward() reaches no parameter: nothing trains" in message
    assert "read out of the graph there by .item()" in message
    assert _grad_lost(leaves_of_their_own) == []


def gan_whose_generator_step_detaches() -> None:
    """The critic's step detaches the fakes, as it should; the generator's step does too, by
    mistake: the generator never trains."""
    torch.manual_seed(0)
    netG, netD = nn.Linear(2, 2), nn.Linear(2, 1)
    optG = torch.optim.SGD(netG.parameters(), lr=0.1)
    optD = torch.optim.SGD(netD.parameters(), lr=0.1)
    for _ in range(3):
        fake = netG(torch.randn(4, 2)).detach()  # right: the critic's step
        loss_D = netD(fake).mean() - netD(torch.randn(4, 2)).mean()
        optD.zero_grad()
        loss_D.backward()
        optD.step()
        loss_G = -netD(netG(torch.randn(4, 2)).detach()).mean()  # the bug
        optG.zero_grad()
        loss_G.backward()
        optG.step()


def test_the_cut_named_is_the_one_after_the_steps_own_use() -> None:
    ((line, message),) = set(_grad_lost(gan_whose_generator_step_detaches))
    assert line == _line_of(gan_whose_generator_step_detaches, "optG.step()")
    bug = _line_of(gan_whose_generator_step_detaches, "# the bug")
    assert f"(used at test_grad_lost_history.py:{bug} by linear)" in message
    assert f"cut after that use, at test_grad_lost_history.py:{bug} " in message


def loss_remade_of_a_weighted_sum_of_numbers() -> None:
    """Multi-task weights applied to the parts' numbers (logged after): the numbers' sum is no
    value the engine can follow back, the `.item()` reads before it are. An evaluation under
    no_grad after each epoch is then the model's only use the engine samples: it is not what
    left the step without gradients."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.randn(16, 4), torch.randint(0, 2, (16,))) for _ in range(32)]
    weights = {"cls": 1.0, "reg": 0.5}

    def evaluate() -> float:
        model.eval()
        with torch.no_grad():
            return sum(float(model(x).argmax(1).eq(y).float().mean()) for x, y in batches[:4])

    for _epoch in range(3):
        model.train()
        for x, y in batches:
            out = model(x)
            parts = {"cls": F.cross_entropy(out, y), "reg": out.pow(2).mean()}
            numbers = sum(weights[k] * v.item() for k, v in parts.items())
            loss = torch.tensor(numbers, requires_grad=True)
            logged = {k: v.item() for k, v in parts.items()}
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        evaluate()
    assert model[0].weight.grad is None and logged


def test_a_loss_remade_of_numbers_read_from_the_graph_is_reported() -> None:
    ((line, message),) = set(_grad_lost(loss_remade_of_a_weighted_sum_of_numbers))
    assert line == _line_of(loss_remade_of_a_weighted_sum_of_numbers, "loss.backward()")
    made = _line_of(loss_remade_of_a_weighted_sum_of_numbers, "loss = torch.tensor(numbers")
    assert f"loss is a new leaf tensor (made at test_grad_lost_history.py:{made} " in message
    assert "read out of the graph at test_grad_lost_history.py:" in message
    assert " by item()" in message
    # (no second finding blaming a no_grad block for the step's missing gradients)
    assert _grad_lost(leaves_of_their_own) == []


def test_a_multitask_loss_of_numbers_is_one_finding_at_its_backward(check) -> None:  # noqa: ANN001
    """A helper's program: the loss re-made of the parts' `.item()`s, and an evaluation under
    no_grad after each epoch (the model's only use the engine samples by then). The finding is
    the re-made leaf; the no_grad block is not blamed for the step's missing gradients (the
    backward reached no graph at all)."""
    script = Path(__file__).parent / "grad_lost_programs" / "multitask_loss_of_numbers.py"
    run = check(script)
    lines = script.read_text().splitlines()
    marked = next(n for n, text in enumerate(lines, 1) if text.endswith("# BUG"))
    assert {(f["rule"], f["line"]) for f in run.report["findings"]} == {("grad-lost", marked)}
    assert "is a new leaf tensor" in run.report["findings"][0]["message"]


class _Pooled(nn.Module):
    """A BERT-like encoder whose pooler runs and goes unused by a token-level loss."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.layer = nn.Embedding(50, 16), nn.Linear(16, 16)
        self.pooler, self.lm = nn.Linear(16, 16), nn.Linear(16, 50)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.layer(self.emb(ids)))
        return self.lm(h), torch.tanh(self.pooler(h[:, 0]))


def test_an_unused_pooler_with_a_logged_norm_and_a_stacked_mask_is_not_a_cut() -> None:
    """The pooler's norm is logged with ``.item()``; each sample's padding mask is built on a
    busy line whose later ops the engine samples out: the mask's input without a record is no
    tensor re-made of what was handed out (a reviewer's find)."""

    def train() -> None:
        torch.manual_seed(0)
        model = _Pooled()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        lengths = [12, 10, 9, 7]
        for _ in range(120):
            ids = torch.randint(0, 50, (4, 12))
            logits, pooled = model(ids)
            pooled.norm(dim=-1).mean().item()  # logged
            mask = torch.stack([torch.arange(12) < n for n in lengths]).unsqueeze(-1).float()
            per_token = F.cross_entropy(logits.transpose(1, 2), ids, reduction="none")
            loss = (per_token.unsqueeze(-1) * mask).sum() / mask.sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    assert _step_findings(train) == []


class _TemperatureAgent:
    """SAC's entropy temperature: ``alpha`` read out with ``.item()`` for the other losses,
    and (the bug) for its own loss, whose ``detach()`` on the log-probabilities is meant."""

    def __init__(self) -> None:
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.target_entropy = -2.0

    @property
    def alpha(self) -> float:
        return self.log_alpha.exp().item()

    def update(self, logp: torch.Tensor) -> None:
        alpha_loss = -(self.alpha * (logp + self.target_entropy).detach()).mean()
        alpha_loss.backward()


def test_a_number_read_out_with_item_is_named_beside_a_meant_detach() -> None:
    torch.manual_seed(0)
    logp = torch.randn(8, requires_grad=True)
    agent = _TemperatureAgent()
    ((line, message),) = _grad_lost(agent.update, logp)
    assert line == _line_of(_TemperatureAgent.update, "alpha_loss.backward()")
    cut = _line_of(_TemperatureAgent.update, "alpha_loss = ")
    read = _line_of(_TemperatureAgent, "return self.log_alpha.exp().item()")
    assert f"its gradient history was cut at test_grad_lost_history.py:{cut} " in message
    assert (
        "by detach(), and `self.alpha` there is a Python number, read out of the graph by "
        f".item() at test_grad_lost_history.py:{read} `return self.log_alpha.exp().item()`: a "
        "number carries no gradient. Use the tensor `self.log_alpha.exp()` in place of "
        "`self.alpha` there (the detach() can stay if it is meant)."
    ) in message


def test_a_detach_with_no_number_read_out_is_named_alone() -> None:
    def update(logp: torch.Tensor, log_alpha: torch.Tensor) -> None:
        scale = 2.0
        loss_value = log_alpha.exp().sum().item()  # read, but not used by the cut's line
        alpha_loss = -(scale * logp.detach()).mean()
        alpha_loss.backward()
        assert loss_value

    logp = torch.randn(8, requires_grad=True)
    ((_, message),) = _grad_lost(update, logp, torch.zeros(1, requires_grad=True))
    assert "by detach(). Compute alpha_loss from tensors that keep their grad_fn there." in message
    assert ".item()" not in message


def raw_weights_cut_after_use() -> None:
    """A two-layer net of raw leaves (``torch.randn(..., requires_grad=True)``, as tutorials
    write before nn.Module) whose hidden layer is detached: ``w1`` never gets a gradient."""
    torch.manual_seed(0)
    w1 = torch.randn(4, 3, requires_grad=True)
    w2 = torch.randn(3, 1, requires_grad=True)
    optimizer = torch.optim.SGD([w1, w2], lr=0.1)
    for _ in range(3):
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        hidden = torch.tanh(x @ w1).detach()
        loss = F.mse_loss(hidden @ w2, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_raw_leaf_weights_cut_after_their_use_are_found_at_the_step() -> None:
    found = set(_grad_lost(raw_weights_cut_after_use))
    ((line, message),) = found
    assert line == _line_of(raw_weights_cut_after_use, "optimizer.step()")
    cut = _line_of(raw_weights_cut_after_use, "hidden = torch.tanh(x @ w1).detach()")
    assert message.startswith(
        "`optimizer.step()`: 1 parameter(s) took part in this step's forward but got no "
        "gradient: w1 (4, 3) (used at test_grad_lost_history.py:"
    )
    assert f"at test_grad_lost_history.py:{cut} `hidden = torch.tanh(x @ w1).detach()` by " in (
        message
    )


def maml_fast_weights_made_leaves() -> None:
    """MAML's inner step made a new leaf: the query loss reaches the fast weights only, and the
    meta-parameters never get a gradient."""
    torch.manual_seed(0)
    w = nn.Parameter(torch.randn(4, 1))
    meta_optimizer = torch.optim.SGD([w], lr=0.1)
    for _ in range(3):
        x_s, y_s, x_q, y_q = (
            torch.randn(8, 4),
            torch.randn(8, 1),
            torch.randn(8, 4),
            torch.randn(8, 1),
        )
        support_loss = F.mse_loss(x_s @ w, y_s)
        (g,) = torch.autograd.grad(support_loss, [w], create_graph=True)
        fast = (w - 0.01 * g).detach().requires_grad_()
        query_loss = F.mse_loss(x_q @ fast, y_q)
        meta_optimizer.zero_grad()
        query_loss.backward()
        meta_optimizer.step()


def reptile_outer_step_by_hand() -> None:
    """Reptile: the inner loop trains a detached copy, the outer step sets ``w.grad`` by hand."""
    torch.manual_seed(0)
    w = nn.Parameter(torch.randn(4, 1))
    meta_optimizer = torch.optim.SGD([w], lr=0.5)
    for _ in range(3):
        fast = w.detach().clone().requires_grad_()
        for _ in range(2):
            x, y = torch.randn(8, 4), torch.randn(8, 1)
            (g,) = torch.autograd.grad(F.mse_loss(x @ fast, y), [fast])
            fast = (fast - 0.1 * g).detach().requires_grad_()
        meta_optimizer.zero_grad()
        w.grad = w.detach() - fast.detach()
        meta_optimizer.step()


def test_maml_fast_weights_made_leaves_are_named_as_the_cut_at_the_step() -> None:
    ((line, message),) = set(_grad_lost(maml_fast_weights_made_leaves))
    assert line == _line_of(maml_fast_weights_made_leaves, "meta_optimizer.step()")
    cut = _line_of(maml_fast_weights_made_leaves, "fast = (w - 0.01 * g)")
    assert message.startswith(
        "`meta_optimizer.step()`: 1 parameter(s) took part in this step's forward but got no "
        "gradient: w (4, 1)"
    )
    assert (
        f"at test_grad_lost_history.py:{cut} `fast = (w - 0.01 * g).detach().requires_grad_()` "
        "by detach()."
    ) in message


def test_reptiles_outer_step_by_hand_stays_quiet() -> None:
    assert _grad_lost(reptile_outer_step_by_hand) == []


def maml_meta_batch(fast_weights_cut: bool) -> None:
    """MAML as learn2learn-style code writes it: a meta-batch of four tasks, two inner steps
    each through ``functional_call``; ``fast_weights_cut``: the inner step re-leafs them."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    meta_opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        meta_opt.zero_grad()
        for _ in range(4):
            x_s, y_s = torch.randn(8, 4), torch.randn(8, 1)
            x_q, y_q = torch.randn(8, 4), torch.randn(8, 1)
            params = dict(model.named_parameters())
            for _ in range(2):
                support_loss = F.mse_loss(functional_call(model, params, (x_s,)), y_s)
                grads = torch.autograd.grad(support_loss, params.values(), create_graph=True)
                if fast_weights_cut:
                    params = {
                        n: (p - 0.01 * g).detach().requires_grad_()
                        for (n, p), g in zip(params.items(), grads)
                    }
                else:
                    params = {n: p - 0.01 * g for (n, p), g in zip(params.items(), grads)}
            F.mse_loss(functional_call(model, params, (x_q,)), y_q).backward()
        meta_opt.step()


def test_a_meta_batch_of_tasks_whose_fast_weights_are_re_leafed_is_found() -> None:
    # (ops are sampled per line: the last task's forward is seen, its .detach() is not)
    ((line, message),) = set(_grad_lost(maml_meta_batch, True))
    assert line == _line_of(maml_meta_batch, "meta_opt.step()")
    cut = _line_of(maml_meta_batch, "n: (p - 0.01 * g).detach().requires_grad_()")
    assert message.startswith(
        "`meta_opt.step()`: 2 parameter(s) took part in this step's forward but got no "
        "gradient: model.weight (1, 4)"
    )
    assert f"at test_grad_lost_history.py:{cut} `n: (p - 0.01 * g)" in message
    assert message.endswith(
        "by detach(). Keep the tensors between that use and the loss in the graph."
    )


def test_a_meta_batch_of_tasks_keeping_the_inner_graph_stays_quiet() -> None:
    assert _grad_lost(maml_meta_batch, False) == []


def pinn_second_derivative_without_create_graph() -> None:
    """A physics-informed net's u_xx: the first autograd.grad lacks create_graph=True."""
    torch.manual_seed(0)
    x = torch.linspace(-1, 1, 8).unsqueeze(1).requires_grad_(True)
    net = nn.Sequential(nn.Linear(1, 8), nn.Tanh(), nn.Linear(8, 1))
    u = net(x)
    u_x = torch.autograd.grad(u, x, grad_outputs=torch.ones_like(u))[0]
    torch.autograd.grad(u_x, x, grad_outputs=torch.ones_like(u_x))


def test_a_gradient_taken_without_create_graph_is_said_to_need_it() -> None:
    ((line, message),) = _grad_lost(pinn_second_derivative_without_create_graph)
    assert line == _line_of(
        pinn_second_derivative_without_create_graph, "    torch.autograd.grad(u_x"
    )
    first = _line_of(pinn_second_derivative_without_create_graph, "u_x = torch.autograd.grad(")
    assert message.endswith(
        f"u_x has no grad_fn and does not require grad: it was computed at "
        f"test_grad_lost_history.py:{first} `u_x = torch.autograd.grad(u, x, "
        "grad_outputs=torch.ones_like(u))[0]` by torch.autograd.grad without create_graph=True, "
        "which returns gradients with no history of their own. Pass create_graph=True there to "
        "differentiate them again (a second derivative, a gradient penalty)."
    )


def _gradient_penalty(critic: nn.Module, real: torch.Tensor, fake: torch.Tensor, graph: bool):  # noqa: ANN202
    """PyTorch-GAN's compute_gradient_penalty (wgan_gp.py); ``graph``: its create_graph."""
    alpha = torch.rand(real.size(0), 1)
    interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    d_interpolates = critic(interpolates)
    gradients = torch.autograd.grad(
        outputs=d_interpolates,
        inputs=interpolates,
        grad_outputs=torch.ones_like(d_interpolates),
        create_graph=graph,
        retain_graph=True,
    )[0]
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean()


def wgan_gp_critic_steps(create_graph: bool) -> None:
    torch.manual_seed(0)
    generator = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    critic = nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    optimizer_d = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.5, 0.9))
    lambda_gp = 10
    for _ in range(3):
        real = torch.randn(32, 2) + 2
        fake = generator(torch.randn(32, 4))
        optimizer_d.zero_grad()
        gp = _gradient_penalty(critic, real, fake.detach(), create_graph)
        d_loss = -critic(real).mean() + critic(fake.detach()).mean() + lambda_gp * gp
        d_loss.backward()
        optimizer_d.step()


def test_a_gradient_penalty_taken_without_create_graph_is_found_at_the_loss() -> None:
    ((line, message),) = set(_grad_lost(wgan_gp_critic_steps, False))
    assert line == _line_of(wgan_gp_critic_steps, "d_loss = -critic(real)")
    taken = _line_of(_gradient_penalty, "gradients = torch.autograd.grad(")
    assert message.startswith(
        "`d_loss = -critic(real).mean() + critic(fake.detach()).mean() + lambda_gp * gp`: a "
        "term of d_loss has no gradient history: it is made of the gradients "
        f"torch.autograd.grad returned at test_grad_lost_history.py:{taken} "
    )
    backward = _line_of(wgan_gp_critic_steps, "d_loss.backward()")
    assert message.endswith(
        "without create_graph=True, which have none of their own, so it adds a constant and "
        "trains nothing (a gradient penalty that never penalises; d_loss.backward() at "
        f"test_grad_lost_history.py:{backward} `d_loss.backward()` passes it by). Pass "
        "create_graph=True to that torch.autograd.grad."
    )


def first_order_maml_fast_weights() -> None:
    """First-order MAML: the inner gradients are taken without a graph on purpose."""
    torch.manual_seed(0)
    w = nn.Parameter(torch.randn(4, 1))
    b = nn.Parameter(torch.zeros(1))
    meta_optimizer = torch.optim.SGD([w, b], lr=0.1)
    for _ in range(3):
        x_s, y_s, x_q, y_q = (
            torch.randn(8, 4),
            torch.randn(8, 1),
            torch.randn(8, 4),
            torch.randn(8, 1),
        )
        g_w, g_b = torch.autograd.grad(F.mse_loss(x_s @ w + b, y_s), [w, b])
        fast_w, fast_b = w - 0.01 * g_w, b - 0.01 * g_b
        meta_optimizer.zero_grad()
        F.mse_loss(x_q @ fast_w + fast_b, y_q).backward()
        meta_optimizer.step()


def test_a_gradient_penalty_with_create_graph_and_first_order_maml_stay_quiet() -> None:
    assert _grad_lost(wgan_gp_critic_steps, True) == []
    assert _grad_lost(first_order_maml_fast_weights) == []


def ema_teacher_in_the_optimizer() -> None:
    """Mean teacher / BYOL written loosely: the teacher's parameters are in the optimizer
    beside the student's, its output is the detached target, and it learns by EMA by hand."""
    torch.manual_seed(0)
    student = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    teacher = copy.deepcopy(student)
    optimizer = torch.optim.Adam([*student.parameters(), *teacher.parameters()], lr=1e-3)
    for _ in range(4):
        x = torch.randn(32, 8)
        target = teacher(x).detach()
        loss = F.mse_loss(student(x), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            for t, s in zip(teacher.parameters(), student.parameters()):
                t.mul_(0.99).add_(0.01 * s)


def vq_codebook_learned_by_ema() -> None:
    """A VQ-VAE whose codebook (an nn.Embedding in the optimizer) learns by EMA of the codes'
    encodings, through the straight-through estimator (zalandoresearch/pytorch-vq-vae)."""
    torch.manual_seed(0)
    encoder, decoder, codebook = nn.Linear(4, 3), nn.Linear(3, 4), nn.Embedding(8, 3)
    params = [*encoder.parameters(), *decoder.parameters(), *codebook.parameters()]
    optimizer = torch.optim.Adam(params)
    for _ in range(4):
        x = torch.randn(16, 4)
        z = encoder(x)
        codes = torch.cdist(z, codebook.weight).argmin(1)
        quantized = codebook.weight[codes]
        loss = F.mse_loss(decoder(z + (quantized - z).detach()), x)
        loss = loss + 0.25 * F.mse_loss(z, quantized.detach())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            codebook.weight.data.mul_(0.99).index_add_(0, codes, 0.01 * z)


class _Byol(nn.Module):
    """BYOL's learner as reimplementations write it: the target encoder is a deep copy of the
    online one (its parameters require grad and are in ``learner.parameters()``)."""

    def __init__(self) -> None:
        super().__init__()
        self.online = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU())
        self.predictor = nn.Linear(16, 16)
        self.target = copy.deepcopy(self.online)

    @torch.no_grad()
    def update_moving_average(self, beta: float = 0.99) -> None:
        for current, ma in zip(self.online.parameters(), self.target.parameters()):
            ma.data = ma.data * beta + (1 - beta) * current.data

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        prediction = self.predictor(self.online(x1))
        return -F.cosine_similarity(prediction, self.target(x2).detach(), dim=-1).mean()


def byol_target_written_through_data() -> None:
    """The target network's EMA assigns ``ma.data`` (lucidrains' byol-pytorch's form)."""
    torch.manual_seed(0)
    learner = _Byol()
    optimizer = torch.optim.Adam(learner.parameters(), lr=3e-4)
    for _ in range(12):
        x = torch.randn(32, 8)
        loss = learner(x + 0.1 * torch.randn_like(x), x + 0.1 * torch.randn_like(x))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        learner.update_moving_average()


class _QuantizerEma(nn.Module):
    """zalandoresearch/pytorch-vq-vae's VectorQuantizerEMA, cut down: the codebook is re-made
    as a new Parameter at each training forward (the optimizer keeps the first one)."""

    def __init__(self, codes: int = 8, dim: int = 3, decay: float = 0.99) -> None:
        super().__init__()
        self._embedding = nn.Embedding(codes, dim)
        self._ema_w = nn.Parameter(torch.randn(codes, dim))
        self.register_buffer("_ema_cluster_size", torch.zeros(codes))
        self._decay = decay

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        distances = torch.cdist(z, self._embedding.weight)
        encodings = F.one_hot(distances.argmin(1), self._embedding.num_embeddings).float()
        quantized = torch.matmul(encodings, self._embedding.weight)
        if self.training:
            size = self._ema_cluster_size * self._decay + (1 - self._decay) * encodings.sum(0)
            self._ema_cluster_size = size
            dw = torch.matmul(encodings.t(), z)
            self._ema_w = nn.Parameter(self._ema_w * self._decay + (1 - self._decay) * dw)
            self._embedding.weight = nn.Parameter(self._ema_w / (size.unsqueeze(1) + 1e-5))
        loss = 0.25 * F.mse_loss(quantized.detach(), z)
        return loss, z + (quantized - z).detach()


def vq_codebook_remade_each_forward() -> None:
    torch.manual_seed(0)
    encoder, quantizer, decoder = nn.Linear(4, 3), _QuantizerEma(), nn.Linear(3, 4)
    model = nn.ModuleList([encoder, quantizer, decoder])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(4):
        x = torch.randn(16, 4)
        vq_loss, quantized = quantizer(encoder(x))
        loss = F.mse_loss(decoder(quantized), x) + vq_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@pytest.mark.parametrize(
    "program",
    [
        ema_teacher_in_the_optimizer,
        vq_codebook_learned_by_ema,
        byol_target_written_through_data,
        vq_codebook_remade_each_forward,
    ],
)
def test_parameters_the_program_updates_by_hand_or_replaced_are_no_cut(program) -> None:  # noqa: ANN001
    assert _grad_lost(program) == []


def test_the_item_that_cut_the_untrained_head_is_named_not_another(check) -> None:  # noqa: ANN001
    """A helper's actor-critic (pytorch/examples' shape): the actor's log-probability saved as
    `.item()` and re-made with `torch.tensor`, the critic's `value.item()` read for the
    advantage. The actor's head gets no gradient; the finding names the `.item()` whose graph
    it fed (each number read out knows the parameters upstream of it), not the newer one."""
    script = Path(__file__).parent / "grad_lost_programs" / "actor_critic_log_prob_item.py"
    run = check(script)
    lines = script.read_text().splitlines()
    cut = next(n for n, text in enumerate(lines, 1) if text.endswith("# BUG"))
    advantage = next(n for n, text in enumerate(lines, 1) if "R - value.item()" in text)
    step = next(n for n, text in enumerate(lines, 1) if text.strip() == "optimizer.step()")
    assert {(f["rule"], f["line"]) for f in run.report["findings"]} == {("grad-lost", step)}
    message = run.report["findings"][0]["message"]
    assert "model.action_head.weight (2, 64)" in message
    assert f"cut after that use, at actor_critic_log_prob_item.py:{cut} " in message
    assert f"actor_critic_log_prob_item.py:{advantage} " not in message
    assert run.returncode == 1 and "Episode 12" in run.stdout


def distillation_steps(detach_student: bool) -> None:
    """Hinton's knowledge distillation as the PyTorch tutorial writes it: soft targets of a
    teacher under no_grad, the student's temperature-scaled log-probabilities, a weighted sum
    with the cross-entropy; ``detach_student``: the student's logits detached in the KD term."""
    torch.manual_seed(0)
    teacher, student = nn.Linear(8, 4), nn.Linear(8, 4)
    optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
    temperature = 2.0
    for _ in range(3):
        x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
        with torch.no_grad():
            teacher_logits = teacher(x)
        student_logits = student(x)
        soft_targets = F.softmax(teacher_logits / temperature, dim=-1)
        kd_input = student_logits.detach() if detach_student else student_logits
        soft_prob = F.log_softmax(kd_input / temperature, dim=-1)
        kd = torch.sum(soft_targets * (soft_targets.log() - soft_prob)) / x.size(0)
        loss = 0.25 * kd * temperature**2 + 0.75 * F.cross_entropy(student_logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_a_distillation_term_of_the_detached_student_is_found_at_the_loss() -> None:
    """The KD term made of ``student_logits.detach()`` adds a constant: the student learns from
    the cross-entropy alone, no error. Found at the sum, naming the detach; the teacher's
    detached outputs (no_grad) and a term with history of its own are no finding."""
    ((line, message),) = set(_grad_lost(distillation_steps, True))
    assert line == _line_of(distillation_steps, "loss = 0.25 * kd")
    detached = _line_of(distillation_steps, "kd_input = student_logits.detach()")
    assert "a term of loss has no gradient history: it is made of a tensor cut by detach() at " in (
        message
    )
    assert f"test_grad_lost_history.py:{detached} " in message
    assert "so it adds a constant and trains nothing" in message
    assert message.endswith(
        "Leave out the detach() there (detach only what is a target, such as a teacher's output)."
    )
    assert _grad_lost(distillation_steps, False) == []


def actor_critic_with_a_detached_baseline() -> None:
    """The actor's log-probability read out with `.item()` and made a tensor again (the bug),
    the advantage against the critic's detached value (right): the constant policy term's cut
    that matters is the number re-made, so the detach is not blamed (grad-lost's step names
    the `.item()`)."""
    torch.manual_seed(0)
    body, actor, critic = nn.Linear(3, 8), nn.Linear(8, 2), nn.Linear(8, 1)
    params = [*body.parameters(), *actor.parameters(), *critic.parameters()]
    optimizer = torch.optim.Adam(params, lr=1e-2)
    for _ in range(3):
        h = torch.relu(body(torch.randn(5, 3)))
        log_probs = [p.item() for p in torch.log_softmax(actor(h), dim=-1)[:, 0]]
        values = critic(h).squeeze(-1)
        advantages = 1.0 - values.detach()
        policy_loss = (-torch.tensor(log_probs) * advantages).sum()
        loss = policy_loss + ((1.0 - values) ** 2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_a_detached_baseline_beside_a_number_made_a_tensor_again_is_not_blamed() -> None:
    found = _grad_lost(actor_critic_with_a_detached_baseline)
    assert all("cut by detach()" not in message for _, message in found), found
    step = _line_of(actor_critic_with_a_detached_baseline, "optimizer.step()")
    assert {line for line, _ in found} == {step}


def test_a_parameter_re_made_after_its_optimizer_took_it_is_named(check) -> None:  # noqa: ANN001
    """GradNorm's task weights renormalized as a new Parameter each step (a helper's program):
    the forward uses the new one, the optimizer steps the first, which gets no gradient from the
    second step on. The finding names the line re-making it and the in-place update, not the
    unrelated no_grad block computing the GradNorm target; written in place, no finding."""
    script = Path(__file__).parent / "grad_lost_programs" / "gradnorm_task_weights_remade.py"
    lines = script.read_text().splitlines()
    remade = next(n for n, text in enumerate(lines, 1) if text.endswith("# BUG"))
    step = next(n for n, text in enumerate(lines, 1) if text.strip() == "opt_w.step()")
    run = check(script, "--remade")
    assert {(f["rule"], f["line"]) for f in run.report["findings"]} == {("grad-lost", step)}
    message = run.report["findings"][0]["message"]
    assert "opt_w steps a tensor the program no longer uses: task_w names a new one" in message
    assert f"gradnorm_task_weights_remade.py:{remade} `task_w = nn.Parameter(" in message
    assert "`with torch.no_grad(): task_w.copy_(...)`" in message
    assert "no_grad()" not in message.split("Update")[0]
    assert run.returncode == 1 and "task weights" in run.stdout
    clean = check(script)
    assert clean.report["findings"] == [] and clean.returncode == 0


def test_a_raw_weight_projected_into_a_new_leaf_is_named() -> None:
    """A positive scale kept positive the short way, ``scale = scale.detach().clamp(min=0.1)
    .requires_grad_()`` after each step, in a function: the optimizer keeps the first tensor.
    Clamped in place (``scale.clamp_(min=0.1)`` under no_grad), nothing is reported."""

    def fit(in_place: bool) -> None:
        torch.manual_seed(0)
        model = nn.Linear(3, 1)
        scale = torch.ones(1, requires_grad=True)
        optimizer = torch.optim.SGD([*model.parameters(), scale], lr=0.1)
        for _ in range(4):
            x = torch.randn(8, 3)
            loss = (model(x) * scale - x.sum(1, keepdim=True)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if in_place:
                with torch.no_grad():
                    scale.clamp_(min=0.1)
            else:
                scale = scale.detach().clamp(min=0.1).requires_grad_()

    messages = _step_findings(lambda: fit(in_place=False))
    assert len(messages) == 1, messages
    line = _line_of(fit, "scale = scale.detach().clamp(min=0.1).requires_grad_()")
    assert (
        "optimizer steps a tensor the program no longer uses: scale names a new one"
        in (messages[0])
    )
    assert f":{line} `scale = scale.detach().clamp(min=0.1).requires_grad_()`" in messages[0]
    assert _step_findings(lambda: fit(in_place=True)) == []


def test_a_head_left_out_beside_an_alike_leaf_of_another_optimizer_is_not_called_re_made() -> None:
    """A spare head computed but left out of the loss, its module out of sight (in a dict), and
    uncertainty weights of its shape with an optimizer of their own: no name is re-assigned in
    the loop, so nothing was re-made, and a head left out of the loss is no finding."""

    def train() -> None:
        torch.manual_seed(0)
        nets = {"body": nn.Linear(3, 2), "spare": nn.Linear(3, 2)}
        log_vars = nn.Parameter(torch.zeros(2))
        opt = torch.optim.SGD([*nets["body"].parameters(), *nets["spare"].parameters()], lr=0.1)
        opt_w = torch.optim.SGD([log_vars], lr=0.1)
        for _ in range(4):
            x = torch.randn(8, 3)
            nets["spare"](x)  # (left out of the loss)
            losses = nets["body"](x).pow(2).mean(0)
            loss = (torch.exp(-log_vars) * losses + log_vars).sum()
            opt.zero_grad()
            opt_w.zero_grad()
            loss.backward()
            opt.step()
            opt_w.step()

    assert _step_findings(train) == []
