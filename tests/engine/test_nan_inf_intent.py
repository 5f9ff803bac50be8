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
