"""``broadcast`` tells the ``(N,) - (N, 1)`` mistake from outer products people write on purpose:
the sinusoidal positional encoding of every Transformer tutorial, pairwise differences of a
tensor unsqueezed on an earlier line — and keeps finding the mistake."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import tensor_dap
from tensor_dap.testing import accelerator_device


def _broadcasts(run, *args) -> list[str]:  # noqa: ANN001
    with tensor_dap.watch(rules=["broadcast"]) as watch:
        run(*args)
    return [f.message for f in watch.findings if f.rule == "broadcast"]


def positional_encoding(max_len: int, d_model: int, device: torch.device) -> torch.Tensor:
    """As in the PyTorch Transformer tutorial."""
    position = torch.arange(max_len, device=device).unsqueeze(1)
    div_term = torch.exp(
        torch.arange(0, d_model, 2, device=device) * (-math.log(10000.0) / d_model)
    )
    pe = torch.zeros(max_len, 1, d_model, device=device)
    pe[:, 0, 0::2] = torch.sin(position * div_term)
    pe[:, 0, 1::2] = torch.cos(position * div_term)
    return pe


def positional_encoding_reshaped(max_len: int, d_model: int, device: torch.device) -> torch.Tensor:
    """The other common spelling: ``reshape(max_len, 1)`` on an earlier line."""
    position = torch.arange(0, max_len, dtype=torch.float, device=device).reshape(max_len, 1)
    div_term = torch.exp(
        torch.arange(0, d_model, 2, device=device).float() * (-math.log(10000.0) / d_model)
    )
    return torch.sin(position * div_term)


@pytest.mark.parametrize("device", ["cpu", "accel"])
@pytest.mark.parametrize("build", [positional_encoding, positional_encoding_reshaped])
def test_positional_encoding_is_an_intended_outer_product(build, device: str) -> None:  # noqa: ANN001
    where = accelerator_device() if device == "accel" else torch.device("cpu")
    assert _broadcasts(build, 64, 16, where) == []


def test_positional_encoding_whose_sizes_coincide_is_still_intended() -> None:
    """``max_len == d_model / 2``: the sizes match, but ``position`` was unsqueezed on purpose."""
    assert _broadcasts(positional_encoding, 8, 16, torch.device("cpu")) == []


def test_an_outer_product_of_different_sizes_written_directly_is_intended() -> None:
    def scores() -> torch.Tensor:
        times = torch.linspace(0, 1, 50).view(50, 1)
        freqs = torch.randn(8)
        return times * freqs

    assert _broadcasts(scores) == []


def test_pairwise_differences_of_an_unsqueezed_tensor_are_intended() -> None:
    def pairwise() -> torch.Tensor:
        x = torch.randn(6)
        column = x.unsqueeze(1)
        return column - x  # (6, 1) - (6,): every pair, on purpose

    assert _broadcasts(pairwise) == []


def test_an_intended_site_stays_intended_after_provenance_sampling() -> None:
    """Provenance is recorded for a call site's first runs, then one in 64: the 9th run of an
    intended outer product must not turn into a finding."""

    def step() -> torch.Tensor:
        x = torch.randn(6)
        column = x.unsqueeze(1)
        return column - x

    def loop() -> None:
        for _ in range(40):
            step()

    assert _broadcasts(loop) == []


def test_the_regression_mistake_is_still_found() -> None:
    """A ``(B, 1)`` prediction against ``(B,)`` targets, the same size on both sides."""

    def regression() -> None:
        model = torch.nn.Linear(3, 1)
        x, y = torch.randn(8, 3), torch.randn(8)
        pred = model(x)
        ((y - pred) ** 2).mean()

    (message,) = _broadcasts(regression)
    assert message.startswith("`y - pred`: y (8,), pred (8, 1) broadcast to (8, 8)")


def test_mse_loss_on_mismatched_shapes_is_found() -> None:
    def regression() -> None:
        pred, target = torch.randn(8, 1), torch.randn(8)
        with pytest.warns(UserWarning):
            F.mse_loss(pred, target)

    assert len(_broadcasts(regression)) == 1


def test_advantage_of_returns_and_stacked_values_is_found() -> None:
    """Actor-critic: returns ``(T,)`` minus critic values stacked to ``(T, 1)``."""

    def advantage() -> torch.Tensor:
        values = torch.stack([torch.randn(1) for _ in range(5)])
        returns = torch.tensor([1.0, 0.9, 0.8, 0.7, 0.6])
        return returns - values

    (message,) = _broadcasts(advantage)
    assert "returns (5,), values (5, 1) broadcast to (5, 5)" in message


def test_a_target_column_sliced_or_indexed_per_batch_is_found() -> None:
    """Indexing keeps the size-1 dim of what it indexes: ``Y[i:i + bs]`` or ``Y[idx]`` of a
    ``(N, 1)`` target column against a ``(bs,)`` prediction is the mistake, not an intent."""

    def minibatches() -> None:
        w = torch.randn(4, requires_grad=True)
        X, Y = torch.randn(32, 4), torch.rand(32, 1)
        for i in range(0, 32, 8):
            ((X[i : i + 8] @ w - Y[i : i + 8]) ** 2).mean().backward()
        idx = torch.randperm(32)[:8]
        ((X[idx] @ w - Y[idx]) ** 2).mean().backward()

    sliced, indexed = _broadcasts(minibatches)
    assert sliced.startswith("`X[i : i + 8] @ w - Y[i : i + 8]`: X[i : i + 8] @ w (8,), ")
    assert "Y[i : i + 8] (8, 1) broadcast to (8, 8)" in sliced
    assert "(e.g. Y[idx].squeeze(-1) or (X[idx] @ w).unsqueeze(-1))" in indexed


def test_a_column_indexed_with_none_on_an_earlier_line_is_intended() -> None:
    def pairwise() -> torch.Tensor:
        x = torch.randn(6)
        column = x[:, None]
        return column - x

    assert _broadcasts(pairwise) == []


def test_a_jagged_nested_tensor_scaled_per_feature_is_skipped_not_a_failure() -> None:
    """Its ragged size (a nested int) has no order: the op is skipped, the rule stays on."""

    def scale() -> torch.Tensor:
        jagged = torch.nested.nested_tensor(
            [torch.randn(n, 6) for n in (2, 4, 3)], layout=torch.jagged
        )
        return jagged * torch.full((6,), 2.0)

    with tensor_dap.watch(rules=["broadcast"]) as watch:
        scale()
    assert watch.failed == {} and watch.findings == []


def test_columns_sliced_one_wide_and_slices_of_a_column_made_on_purpose_are_intended() -> None:
    """NMS's overlap of a box set with itself (``boxes[:, 0:1]`` against ``boxes[:, 0]``), a
    positional encoding's ``position[:T]`` whose length is half the model's width."""

    def overlaps() -> torch.Tensor:
        boxes = torch.rand(50, 4) * 100
        x1, x2 = boxes[:, 0:1], boxes[:, 2:3]
        return torch.minimum(x2, boxes[:, 2]) - torch.maximum(x1, boxes[:, 0])

    def encoding() -> torch.Tensor:
        position = torch.arange(512).unsqueeze(1).float()
        div_term = torch.exp(torch.arange(0, 64, 2).float() * (-math.log(10000.0) / 64))
        pos = position[:32]
        return torch.sin(pos * div_term)

    assert _broadcasts(overlaps) == [] and _broadcasts(encoding) == []


def test_a_target_column_indexed_from_one_reshaped_against_a_prediction_is_found() -> None:
    """A NeRF-style depth loss: targets reshaped ``(-1, 1)`` once, a batch of them indexed out
    and subtracted from a rendered depth that requires grad."""

    def depth_loss() -> torch.Tensor:
        w = torch.randn(3, requires_grad=True)
        depths = torch.rand(100).reshape(-1, 1)
        sel = torch.randperm(100)[:16]
        rendered = torch.randn(16, 3) @ w
        target = depths[sel]
        return ((rendered - target) ** 2).mean()

    (message,) = _broadcasts(depth_loss)
    assert "rendered (16,), target (16, 1) broadcast to (16, 16)" in message


def _masked_mean_loss(per_token: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Masked mean pooling written for ``(B, T, D)`` features, used on ``(B, T)`` losses."""
    mask = (torch.arange(per_token.shape[1])[None, :] < lengths[:, None]).float()
    seq_loss = (per_token * mask).sum(1) / lengths[:, None]
    return seq_loss.mean()


def test_a_per_row_total_divided_by_a_column_made_on_purpose_is_found() -> None:
    """``(B,) / (B, 1)``: the ``[:, None]`` is on purpose, meant for a feature dim the total
    does not have; every row's total is divided by every row's length, silently."""

    def train() -> None:
        for _ in range(20):  # (past the runs whose provenance is recorded in full)
            per_token = torch.rand(8, 12, requires_grad=True)
            _masked_mean_loss(per_token, torch.randint(3, 13, (8,))).backward()

    (message,) = _broadcasts(train)
    assert message.startswith(
        "`(per_token * mask).sum(1) / lengths[:, None]`: (per_token * mask).sum(1) (8,) divided"
        " by lengths[:, None] (8, 1) broadcasts to (8, 8)"
    )
    assert "divide by lengths," in message


def test_a_divisor_unsqueezed_on_an_earlier_line_is_found() -> None:
    def pool() -> torch.Tensor:
        scores, mask = torch.rand(4, 7), torch.ones(4, 7)
        counts = mask.sum(1).unsqueeze(1)
        return scores.sum(1) / counts

    (message,) = _broadcasts(pool)
    assert "scores.sum(1) (4,) divided by counts (4, 1) broadcasts to (4, 4)" in message
    assert "divide by counts.squeeze(-1)" in message


def test_divisions_and_outer_ops_people_write_on_purpose_stay_clean() -> None:
    def correct() -> None:
        features, mask = torch.rand(4, 7, 16), torch.ones(4, 7)
        (features * mask[..., None]).sum(1) / mask.sum(1)[:, None]  # (4, 16) / (4, 1)
        t = torch.rand(5)
        t / t[:, None]  # ratios of a vector's own elements
        lengths = torch.randint(4, 17, (16,))
        torch.arange(16, dtype=torch.float32) / lengths[:, None].float()  # positions / lengths
        a, b = torch.rand(6, 3), torch.rand(6, 3)
        # cosine similarity: norms of two batches of the same size, an outer product
        (a @ b.T) / (a.norm(dim=1)[:, None] * b.norm(dim=1))

    assert _broadcasts(correct) == []


def test_the_fix_names_the_size_one_dim_that_broadcast() -> None:
    """A segmentation target ``(N, 1, H, W)`` against ``(N, H, W)`` probabilities: the fix is
    ``target.squeeze(1)``; ``squeeze(-1)`` would remove nothing."""

    def dice() -> None:
        logits = torch.randn(4, 8, 8, requires_grad=True)
        target = (torch.rand(4, 1, 8, 8) > 0.5).float()
        probs = torch.sigmoid(logits)
        (1 - 2 * (probs * target).sum() / (probs.sum() + target.sum())).backward()

    (message,) = _broadcasts(dice)
    assert "probs (4, 8, 8), target (4, 1, 8, 8) broadcast to (4, 4, 8, 8)" in message
    assert "(e.g. target.squeeze(1) or probs.unsqueeze(1))" in message
