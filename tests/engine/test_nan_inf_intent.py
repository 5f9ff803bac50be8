"""``nan-inf`` leaves alone the Inf a program asks for (causal masks filled with ``-inf``, in
user code and inside ``nn.Transformer``), and a NaN/Inf its forward check reported is not
reported a second time by the backward check."""

from __future__ import annotations

import contextlib
import inspect

import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap


def _nan_inf(run) -> list[tuple[int, str]]:  # noqa: ANN001
    with tensor_dap.watch(rules=["nan-inf"]) as watch:
        run()
    return [(f.line, f.message) for f in watch.findings]


def mingpt_attention() -> None:
    q = k = torch.randn(2, 4, 8, 16, requires_grad=True)
    causal = torch.tril(torch.ones(8, 8)).view(1, 1, 8, 8)
    att = (q @ k.transpose(-2, -1)) * 0.25
    att = att.masked_fill(causal == 0, float("-inf"))
    F.softmax(att, dim=-1).sum().backward()


def transformer_masks() -> None:
    model = nn.Transformer(
        d_model=16,
        nhead=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        dim_feedforward=32,
        dropout=0.0,
        batch_first=True,
    )
    mask = nn.Transformer.generate_square_subsequent_mask(6)
    out = model(torch.randn(2, 5, 16), torch.randn(2, 6, 16), tgt_mask=mask)
    out.sum().backward()


def filled_by_hand() -> None:
    scores = torch.randn(3, 3)
    mask = torch.full((3, 3), float("-inf")).triu(1)
    F.softmax(scores + mask, dim=-1)


def test_asked_for_infinities_are_not_reported() -> None:
    assert _nan_inf(mingpt_attention) == []
    assert _nan_inf(transformer_masks) == []
    assert _nan_inf(filled_by_hand) == []


def entropy_of_a_zero_probability() -> None:
    """An actor-critic's entropy bonus written by hand, over an episode of steps."""
    torch.manual_seed(0)
    policy = nn.Linear(4, 6)
    entropies = []
    for _ in range(12):
        logits = policy(torch.randn(1, 4)) * 60.0  # a low temperature: some probabilities are 0
        probs = F.softmax(logits, dim=-1)
        log_p = torch.log(probs)
        entropies.append(-(probs * log_p).sum())
    with contextlib.suppress(RuntimeError):
        torch.stack(entropies).mean().backward()


def test_a_forward_finding_is_not_reported_again_in_backward() -> None:
    lines, first = inspect.getsourcelines(entropy_of_a_zero_probability)
    log_line = next(first + i for i, text in enumerate(lines) if "log_p = torch.log(probs)" in text)
    found = _nan_inf(entropy_of_a_zero_probability)
    assert [line for line, _ in found] == [log_line], found


def amp_float16_training(distance_eps: float, steps: int) -> list[float]:
    """Mixed precision as the AMP recipe writes it (float16 autocast, ``GradScaler``), on the
    CPU: a scale too large for float16 at first, so the first steps' gradients overflow and the
    scaler skips them. The loss holds a Euclidean distance; without an eps its gradient is Inf
    at two equal points whatever the scale."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20)
    x = torch.randn(8, 16) * 10
    y = torch.randint(0, 4, (8,))
    anchor = torch.zeros(8, 4)
    scales = []
    for _ in range(steps):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)
            loss = F.cross_entropy(out, y)
        gap = (out.float() * 0 - anchor).pow(2).sum(-1)
        loss = loss + 1e-3 * torch.sqrt(gap + distance_eps).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales


def test_gradscaler_overflow_is_left_to_the_scaler() -> None:
    scales: list[float] = []
    findings = _nan_inf(lambda: scales.extend(amp_float16_training(1e-12, 12)))
    assert scales[0] < 2.0**20 and scales[-1] == scales[-2], scales  # it skipped, then trained
    assert findings == []


def test_a_non_finite_gradient_the_scale_does_not_cause_is_reported() -> None:
    scales: list[float] = []
    findings = _nan_inf(lambda: scales.extend(amp_float16_training(0.0, 12)))
    assert all(later < earlier for earlier, later in zip(scales, scales[1:]))  # skips every step
    ((line, message),) = findings
    source, first = inspect.getsourcelines(amp_float16_training)
    assert line == first + next(i for i, t in enumerate(source) if "torch.sqrt(gap" in t)
    assert "the gradient computed by SqrtBackward0" in message
    assert "8 scaled backward() calls in a row: GradScaler skipped each step" in message
    assert "add an eps inside it" in message


def gcn_normalisations() -> None:
    """Symmetric GCN normalisation with isolated nodes (degree 0), as GCN code writes it."""
    deg = torch.tensor([0.0, 1.0, 4.0, 0.0])
    dinv = deg.pow(-0.5)  # PyTorch Geometric 1.x gcn_norm
    dinv[dinv == float("inf")] = 0
    inv = deg.clone().pow_(-0.5)  # PyTorch Geometric 2.x
    inv.masked_fill_(inv == float("inf"), 0)
    r_inv = deg.pow(-1).flatten()  # pygcn's normalize()
    r_inv[torch.isinf(r_inv)] = 0.0
    safe = torch.nan_to_num(torch.log(deg), neginf=0.0)  # one line
    assert torch.isfinite(dinv).all() and torch.isfinite(inv).all() and torch.isfinite(safe).all()
    assert torch.isfinite(r_inv).all()


def written_in_place() -> None:
    deg = torch.tensor([0.0, 1.0, 4.0])
    deg.pow_(-0.5)
    x = torch.tensor([0.0, 1.0])
    x.log_()


def test_non_finite_values_the_program_masks_next_are_not_reported() -> None:
    assert _nan_inf(gcn_normalisations) == []


def test_in_place_ops_are_judged_on_their_target_before_the_write() -> None:
    found = _nan_inf(written_in_place)
    source, first = inspect.getsourcelines(written_in_place)
    assert [line - first for line, _ in found] == [2, 4]
    (_, pow_message), (_, log_message) = found
    assert pow_message.startswith("`deg.pow_(-0.5)`: pow_ produced 0 NaN and 1 Inf values")
    assert "deg held 0 where it is now Inf" in pow_message
    assert "x held values outside the function's domain (<= 0)" in log_message
