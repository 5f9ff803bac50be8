"""A bentrevett-style Seq2Seq whose forward collects the decoder's steps in ``outputs[t] =
output``; the training step raises before ``loss.backward()`` (``raise`` argument: a shape error
in the loss, as a wrong ``view`` makes), else it trains."""

import sys

import torch
import torch.nn as nn


class Seq2Seq(nn.Module):
    def __init__(self, vocab: int = 20, hid: int = 32) -> None:
        super().__init__()
        self.vocab = vocab
        self.emb = nn.Embedding(vocab, hid)
        self.cell = nn.GRUCell(hid, hid)
        self.out = nn.Linear(hid, vocab)

    def forward(self, src: torch.Tensor, trg: torch.Tensor) -> torch.Tensor:
        trg_len, batch_size = trg.shape
        outputs = torch.zeros(trg_len, batch_size, self.vocab)
        hidden = self.emb(src).mean(0)
        inp = trg[0]
        for t in range(1, trg_len):
            hidden = self.cell(self.emb(inp), hidden)
            output = self.out(hidden)
            outputs[t] = output
            inp = trg[t]
        return outputs


def train_step(model: nn.Module, src: torch.Tensor, trg: torch.Tensor) -> float:
    output = model(src, trg)
    width = output.shape[-1] + (1 if "raise" in sys.argv else 0)
    loss = criterion(output[1:].reshape(-1, width), trg[1:].reshape(-1))
    loss.backward()
    return loss.item()


torch.manual_seed(0)
model = Seq2Seq()
criterion = nn.CrossEntropyLoss()
src = torch.randint(0, 20, (7, 4))
trg = torch.randint(0, 20, (9, 4))
if "in_function" in sys.argv:  # (the buffer is freed as the error unwinds train_step)
    print(f"loss {train_step(model, src, trg):.4f}")
else:
    output = model(src, trg)
    width = output.shape[-1] + (1 if "raise" in sys.argv else 0)
    loss = criterion(output[1:].reshape(-1, width), trg[1:].reshape(-1))
    loss.backward()
    print(f"loss {loss.item():.4f}")
