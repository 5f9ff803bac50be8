"""Arguments PyTorch wants on the CPU whatever the device of the others: a packed sequence's
lengths (``pack_padded_sequence(x, lengths.cpu())``: PyTorch refuses them on the device) and
batch sizes. Neither ``device-mismatch`` nor ``leaves-device`` reports them, the stand-in
accelerator runs them as CUDA does (the batch sizes stay on the host), and a float hidden state
left on the CPU is still a mismatch. (CTC's targets and lengths on the CPU: under ``--simulate
cuda``, ``tests/simulate/scripts/host_arguments.py``.)"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import tensor_dap
from tensor_dap.testing import accelerator_device


def _found(program: Callable[[], Any]) -> tuple[list[tuple[str, int]], Any]:
    with tensor_dap.watch(rules=["device-mismatch", "leaves-device"]) as watch:
        result = program()
    return [(f.rule, f.line) for f in watch.findings], result


def _line(program: Callable[[], Any], text: str) -> int:
    lines, first = inspect.getsourcelines(program)
    return next(first + i for i, line in enumerate(lines) if text in line)


def padded_batches_through_a_packed_lstm() -> list[torch.Tensor]:
    """A training loop over padded batches: lengths copied to the CPU for the packing each
    step, in the call and on a line of their own."""
    device = accelerator_device()
    torch.manual_seed(0)
    embed, lstm = nn.Embedding(20, 8).to(device), nn.LSTM(8, 16, batch_first=True).to(device)
    head = nn.Linear(16, 3).to(device)
    params = [*embed.parameters(), *lstm.parameters(), *head.parameters()]
    optimizer = torch.optim.SGD(params, lr=0.1)
    batch_sizes = []
    for step in range(4):
        lengths = torch.randint(2, 7, (5,), device=device)
        tokens = torch.randint(1, 20, (5, 6), device=device)
        if step % 2:
            packed = pack_padded_sequence(
                embed(tokens), lengths.cpu(), batch_first=True, enforce_sorted=False
            )
        else:
            host_lengths = lengths.cpu()
            packed = pack_padded_sequence(
                embed(tokens), host_lengths, batch_first=True, enforce_sorted=False
            )
        batch_sizes.append(packed.batch_sizes)
        out, _ = lstm(packed)
        padded, _ = pad_packed_sequence(out, batch_first=True)
        loss = F.cross_entropy(head(padded[:, 0]), torch.randint(0, 3, (5,), device=device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return batch_sizes


def _encode(lstm: nn.Module, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """A helper that packs, under another name: the copy's line does not say it is for it."""
    from torch.nn.utils.rnn import pack_padded_sequence as pack

    out, _ = lstm(pack(x, lengths, batch_first=True, enforce_sorted=False))
    return pad_packed_sequence(out, batch_first=True)[0]


def lengths_copied_for_a_helper_that_packs() -> None:
    device = accelerator_device()
    lstm = nn.LSTM(4, 8, batch_first=True).to(device)
    optimizer = torch.optim.SGD(lstm.parameters(), lr=0.1)
    for _ in range(4):
        mask = torch.ones(3, 5, device=device)
        mask[1, 3:] = 0
        lengths = mask.sum(1).long().cpu()
        out = _encode(lstm, torch.randn(3, 5, 4, device=device), lengths)
        optimizer.zero_grad()
        out.pow(2).mean().backward()
        optimizer.step()


def test_lengths_copied_for_packing_are_neither_a_mismatch_nor_a_needless_copy() -> None:
    found, batch_sizes = _found(padded_batches_through_a_packed_lstm)
    assert found == []
    assert all(sizes.device.type == "cpu" for sizes in batch_sizes)  # as CUDA gives them
    assert _found(lengths_copied_for_a_helper_that_packs) == ([], None)


def hidden_state_left_on_the_cpu() -> None:
    device = accelerator_device()
    gru = nn.GRU(4, 8).to(device)
    h0 = torch.zeros(1, 2, 8)  # made without device=
    gru(torch.randn(3, 2, 4, device=device), h0)


def test_a_hidden_state_left_on_the_cpu_is_still_a_mismatch() -> None:
    with tensor_dap.watch(rules=["device-mismatch"]) as watch, pytest.raises(RuntimeError):
        hidden_state_left_on_the_cpu()
    (finding,) = watch.findings
    assert finding.line == _line(hidden_state_left_on_the_cpu, "gru(torch.randn")
    assert "h0 is on cpu" in finding.message


def test_lengths_on_the_device_are_refused_as_pytorch_refuses_them() -> None:
    device = accelerator_device()
    with pytest.raises(RuntimeError, match="'lengths' argument should be a 1D CPU int64 tensor"):
        pack_padded_sequence(
            torch.randn(2, 3, 4, device=device), torch.tensor([3, 2], device=device)
        )


def test_a_copy_each_step_for_anything_else_is_still_reported() -> None:
    def copies() -> None:
        device = accelerator_device()
        w = torch.randn(4, 2, device=device, requires_grad=True)
        kept = []
        for _ in range(3):
            out = torch.randn(5, 4, device=device) @ w
            out.sum().backward()
            kept.append(out.detach().cpu())

    found, _ = _found(copies)
    assert found == [("leaves-device", _line(copies, "kept.append(out.detach().cpu())"))]


class _PackingEncoder(nn.Module):
    """Packs in its forward, from lengths handed over as Python numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(4, 8, batch_first=True)

    def forward(self, x: torch.Tensor, lengths: Any) -> torch.Tensor:
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        return self.rnn(packed)[1]


def _train_with_lengths_through_python(to_host: Callable[[torch.Tensor], Any]) -> None:
    device = accelerator_device()
    torch.manual_seed(0)
    encoder = _PackingEncoder().to(device)
    optimizer = torch.optim.SGD(encoder.parameters(), lr=0.1)
    for _ in range(4):
        tokens = torch.randint(1, 9, (3, 6), device=device)
        tokens[1, 4:] = 0
        tokens[2, 2:] = 0
        lengths = to_host((tokens != 0).sum(1))
        h = encoder(torch.randn(3, 6, 4, device=device), lengths)
        optimizer.zero_grad()
        h.pow(2).mean().backward()
        optimizer.step()


@pytest.mark.parametrize(
    "to_host",
    [
        lambda t: t.tolist(),
        lambda t: t.cpu().numpy(),
        lambda t: t.to("cpu"),
        lambda t: t.to("cpu", torch.int64),
        lambda t: t.to(device=torch.device("cpu")),
    ],
    ids=["tolist", "cpu-numpy", "to-cpu", "to-cpu-int64", "to-device-keyword"],
)
def test_lengths_handed_over_on_the_host_are_no_needless_copy(
    to_host: Callable[[torch.Tensor], Any],
) -> None:
    found, _ = _found(lambda: _train_with_lengths_through_python(to_host))
    assert found == []


def test_a_needless_copy_of_as_many_other_numbers_is_still_reported() -> None:
    def copies_predictions() -> None:
        device = accelerator_device()
        torch.manual_seed(0)
        gru, head = nn.GRU(4, 8, batch_first=True).to(device), nn.Linear(8, 3).to(device)
        optimizer = torch.optim.SGD([*gru.parameters(), *head.parameters()], lr=0.1)
        predictions = []
        for _ in range(4):
            lengths = torch.tensor([6, 4, 2])  # from the data loader, on the CPU
            x = torch.randn(3, 6, 4, device=device)
            h = gru(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))[1]
            logits = head(h[-1])
            optimizer.zero_grad()
            F.cross_entropy(logits, torch.tensor([0, 1, 2], device=device)).backward()
            optimizer.step()
            predictions.append((logits.argmax(1) + 10).tolist())

    found, _ = _found(copies_predictions)
    assert found == [("leaves-device", _line(copies_predictions, "predictions.append("))]


def test_lengths_are_told_from_another_copy_of_as_many_numbers() -> None:
    """The lengths and the labels, both copied with ``.tolist()`` each step, both of the batch's
    size: the labels' copy is needless, the lengths' is not."""

    def copies_labels_too() -> None:
        device = accelerator_device()
        torch.manual_seed(0)
        encoder = _PackingEncoder().to(device)
        optimizer = torch.optim.SGD(encoder.parameters(), lr=0.1)
        seen = []
        for _ in range(4):
            tokens = torch.randint(1, 9, (3, 6), device=device)
            tokens[1, 4:] = 0
            tokens[2, 2:] = 0
            labels = torch.tensor([4, 1, 2], device=device)
            lengths = (tokens != 0).sum(1).tolist()
            seen.append(labels.tolist())
            h = encoder(torch.randn(3, 6, 4, device=device), lengths)
            optimizer.zero_grad()
            h.pow(2).mean().backward()
            optimizer.step()

    found, _ = _found(copies_labels_too)
    assert found == [("leaves-device", _line(copies_labels_too, "seen.append(labels.tolist())"))]


def test_a_sparse_copy_each_step_is_reported_and_the_rule_stays_on() -> None:
    def copies_sparse() -> None:
        device = accelerator_device()
        w = torch.randn(5, device=device, requires_grad=True)
        for _ in range(3):
            (w * 2).sum().backward()
            s = w.detach().to_sparse()
            s.cpu()

    with tensor_dap.watch(rules=["leaves-device"]) as watch:
        copies_sparse()
    assert not watch.failed
    assert [f.line for f in watch.findings] == [_line(copies_sparse, "s.cpu()")]


def test_a_submodule_called_like_its_op_names_the_weights_not_the_arguments_again() -> None:
    """``self.gru(emb, h)``: the op is ``gru`` too, and takes the module's weights after the
    two arguments; they are named as the module's (the third operand was called ``h``)."""

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(20, 8)
            self.gru = nn.GRU(8, 8, batch_first=True)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            emb = self.embed(tokens)
            h = torch.zeros(1, tokens.size(0), 8)
            return self.gru(emb, h)[0]

    device = accelerator_device()
    with tensor_dap.watch(rules=["device-mismatch"]) as watch, pytest.raises(RuntimeError):
        Encoder().to(device)(torch.randint(0, 20, (3, 5), device=device))
    (finding,) = watch.findings
    assert "h is on cpu" in finding.message
    assert finding.message.count("h is on") == 1
    assert "GRU.weight_ih_l0 is on accel:0" in finding.message
