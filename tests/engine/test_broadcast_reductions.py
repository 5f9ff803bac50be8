"""``broadcast`` finds a total over a non-leading dim taken back to the tensor it came from
without ``keepdim``: ``cm / cm.sum(1)`` on a square confusion matrix divides each value by
another row's total, and PyTorch raises nothing because the sizes match."""

from __future__ import annotations

import functools
import inspect
from typing import Callable

import pytest
import torch

import tensor_dap


def _found(program: Callable[[], object]) -> list[tuple[int, str]]:
    with tensor_dap.watch(rules=["broadcast"]) as watch:
        program()
    assert not watch.failed
    return [(f.line, f.message) for f in watch.findings if f.rule == "broadcast"]


def _marked(program: Callable[[], object]) -> set[int]:
    lines, start = inspect.getsourcelines(program)
    return {start + i for i, text in enumerate(lines) if text.rstrip().endswith("# misaligned")}


def per_class_recall() -> None:
    predictions, labels = torch.randint(0, 4, (64,)), torch.randint(0, 4, (64,))
    cm = torch.zeros(4, 4)
    for p, t in zip(predictions, labels):
        cm[t, p] += 1
    recall = cm / cm.sum(1)  # misaligned
    print(recall.diag())


def row_totals_on_an_earlier_line() -> None:
    adj = (torch.rand(6, 6) > 0.5).float() + torch.eye(6)
    degrees = adj.sum(dim=1)
    transition = adj / (degrees + 1e-8)  # misaligned
    adj /= degrees.clamp(min=1)  # misaligned
    print(transition.sum(), adj.sum())


def attention_of_one_sequence() -> None:
    """A hand-written softmax over a batch of one: ``(1, T, T)`` less its ``(1, T)`` maxima."""
    q = torch.randn(1, 5, 8, requires_grad=True)
    scores = q @ q.transpose(1, 2)
    shifted = scores - scores.amax(-1)  # misaligned
    weights = shifted.exp() / shifted.exp().sum(-1, keepdim=True)
    weights.sum().backward()


def softmax_recomputed_inline() -> None:
    """The exponential computed twice on the line (two tensors, the same op of the same input),
    with and without autograd history."""
    logits = torch.nn.Linear(4, 4)(torch.randn(4, 4))
    probs = logits.exp() / logits.exp().sum(1)  # misaligned
    scores = torch.rand(4, 4)
    weights = torch.exp(scores) / torch.exp(scores).sum(dim=1)  # misaligned
    print(probs.sum(), weights.sum())


def confusion_matrix_summed_over_an_epoch() -> None:
    """The total of 100 batches' matrices: the line summing them runs past the first hits the
    engine records where tensors are made, so the matrix has no record (its very tensor is)."""
    cm = torch.zeros(5, 5)
    for _ in range(100):
        predictions, labels = torch.randint(0, 5, (32,)), torch.randint(0, 5, (32,))
        batch_cm = torch.bincount(labels * 5 + predictions, minlength=25).reshape(5, 5)
        cm = cm + batch_cm
    recall = cm.diag() / cm.sum(1)
    normalized = cm / cm.sum(1)  # misaligned
    row_totals = cm.sum(1)
    print(recall, normalized.sum(), cm / row_totals)  # misaligned


def test_each_misaligned_reduction_is_found_at_its_line() -> None:
    programs = (per_class_recall, row_totals_on_an_earlier_line, attention_of_one_sequence)
    for program in (*programs, softmax_recomputed_inline, confusion_matrix_summed_over_an_epoch):
        assert {line for line, _ in _found(program)} == _marked(program), program.__name__


def test_the_message_says_what_lines_up_with_what_and_keeps_the_dim() -> None:
    ((_, message),) = _found(per_class_recall)
    assert message == (
        "`cm / cm.sum(1)`: cm.sum(1) (4,) holds one total per row of cm (4, 4) (over dim 1), but "
        "broadcasting lines it up with cm's columns: each value meets another row's total, with "
        "no error because the sizes happen to match. Keep the reduced dim: "
        "`cm.sum(1, keepdim=True)` (or `cm.sum(1).unsqueeze(1)`)."
    )
    (_, divided), (_, in_place) = _found(row_totals_on_an_earlier_line)
    assert "`(degrees + 1e-8).unsqueeze(1)`" in divided
    assert in_place.startswith("`adj /= degrees.clamp(min=1)`: degrees.clamp(min=1) (6,) holds")
    ((_, message),) = _found(attention_of_one_sequence)
    assert "holds the maximum of scores (1, 5, 5) over dim 2" in message
    assert "`scores.amax(-1, keepdim=True)`" in message


def test_reductions_that_line_up_or_are_meant_stay_clean() -> None:
    def correct() -> None:
        cm = torch.randint(0, 9, (4, 4)).float()
        cm / cm.sum(0)  # a column normalization: dim 0 lines up
        cm / cm.sum(1, keepdim=True)
        cm / cm.sum(1)[:, None]
        cm.T / cm.sum(1)  # the transpose divided by the sums it means (not cm's own)
        # the symmetric normalization D^-1/2 A D^-1/2: a product with the degrees on purpose
        d = cm.sum(1).pow(-0.5)
        d[:, None] * cm * d
        one_row = torch.rand(1, 6)
        one_row / one_row.sum(1)  # one row: its total lines up either way
        features = torch.rand(8, 8, requires_grad=True)
        (features - features.mean(0)) / features.std(0)  # standardized per feature
        x = torch.rand(4, 4)
        x / x.sum()  # a total of everything
        x / x.exp().sum(1)  # another value's totals
        # a chi-square test's expected counts: row totals times column totals
        table = torch.tensor([[10.0, 20, 30], [6, 9, 17], [3, 4, 5]])
        table.sum(1, keepdim=True) * table.sum(0) / table.sum()

    assert _found(correct) == []


def test_a_parameter_is_judged_and_a_sparse_tensor_keeps_its_own_error() -> None:
    """A parameter (a leaf of its own class) is followed through its ``AccumulateGrad``; a
    sparse matrix, whose division by a vector PyTorch refuses, raises as it does unwatched."""
    weight = torch.nn.Parameter(torch.rand(3, 3))
    ((_, message),) = _found(lambda: weight / weight.sum(1))
    assert "weight.sum(1) (3,) holds one total per row of weight (3, 3)" in message

    sparse = torch.rand(3, 3).to_sparse()
    with pytest.raises(RuntimeError) as plain:
        sparse / torch.sparse.sum(sparse, 1).to_dense()
    with tensor_dap.watch(rules=["broadcast"]) as watch, pytest.raises(RuntimeError) as watched:
        sparse / torch.sparse.sum(sparse, 1).to_dense()
    assert str(watched.value) == str(plain.value)
    assert not watch.failed and not watch.findings


def _normalized_after(ops: int) -> torch.Tensor:
    adj = torch.rand(6, 6)
    for _ in range(ops):  # preprocessing: a chain of ops without autograd history
        adj = adj * 1.0
    return adj / adj.sum(1).clamp(min=1e-8)


def test_a_total_is_followed_however_long_the_chain_that_made_its_tensor() -> None:
    """Provenance keeps a few generations of inputs; past them, the op just before a record
    is still known, so a tensor made by a long chain is still seen reduced (one op more or
    less in the preprocessing once hid it)."""
    found = [len(_found(functools.partial(_normalized_after, ops))) for ops in range(9)]
    assert found == [1] * 9


def test_a_norm_is_read_for_its_dim_not_its_order() -> None:
    """``w.norm(1, 0)``: the first argument is the order, the dim is the second."""

    def normalized() -> None:
        with torch.no_grad():
            w = torch.rand(4, 4)
            w / w.norm(1, 0)  # columns: lines up
            w / w.norm(2, 1)  # misaligned

    assert [line for line, _ in _found(normalized)] == [_line_of(normalized, "# misaligned")]


def test_two_totals_over_the_same_dim_are_no_table_s_marginals() -> None:
    """``x.logsumexp(1, keepdim=True) - x.amax(1)``: the same dim kept and removed, an outer
    op by mistake (the marginals of a table are over two dims)."""

    def log_softmax_by_hand() -> None:
        x = torch.rand(4, 6)
        x.logsumexp(1, keepdim=True) - x.amax(1)  # misaligned

    ((line, message),) = _found(log_softmax_by_hand)
    assert line == _line_of(log_softmax_by_hand, "# misaligned")
    assert "broadcast to (4, 4), more elements than any input" in message


def _line_of(program: Callable[[], object], marker: str) -> int:
    lines, start = inspect.getsourcelines(program)
    return next(start + i for i, text in enumerate(lines) if text.rstrip().endswith(marker))
