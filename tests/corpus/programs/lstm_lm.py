"""An LSTM language model trained with truncated BPTT, modelled on pytorch/examples
``word_language_model`` (``RNNModel``, ``batchify``, ``get_batch``, ``repackage_hidden``,
``clip_grad_norm_``), on a synthetic token stream.

Bug variants (first argument):
- ``zero-grad-once``: ``optimizer.zero_grad()`` hoisted above the loop; gradients pile up even
  though they are clipped every step.
- ``cpu-total-loss``: the running loss starts as ``torch.zeros(1)`` on the CPU and the device
  losses are added to it.
- ``tolist-every-step``: the predicted tokens are copied to a Python list every step for a
  sample printout.
- ``total-loss-graph``: the running loss adds ``loss``, not ``loss.detach()``: it keeps every
  step's graph.
- ``hashed-vocab``: token ids are hashes of the words, never mapped to 0..N-1, and the
  vocabulary size is taken as the largest id + 1: the embedding table cannot be allocated.
- ``hidden-not-repackaged``: ``repackage_hidden`` left out: the second window's graph goes on
  from the first's, and its ``backward()`` raises "Trying to backward through the graph a
  second time".
"""

import math
import sys

import torch
import torch.nn as nn

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""
NTOKENS, BPTT, CLIP = 20, 8, 0.25


class RNNModel(nn.Module):
    def __init__(self, ntoken: int, ninp: int, nhid: int, nlayers: int) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.encoder = nn.Embedding(ntoken, ninp)  # bug[hashed-vocab]: out-of-memory
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=0.2)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers = nhid, nlayers

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        return self.decoder(output).view(-1, self.decoder.out_features), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (
            weight.new_zeros(self.nlayers, bsz, self.nhid),
            weight.new_zeros(self.nlayers, bsz, self.nhid),
        )


def batchify(data, bsz, device):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous().to(device)


def get_batch(source, i):
    seq_len = min(BPTT, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    corpus = (torch.arange(400) * 7 + torch.randint(0, 3, (400,))) % NTOKENS
    ntoken = NTOKENS
    if BUG == "hashed-vocab":  # ids hashed from the words, the vocabulary sized by the largest
        corpus = corpus * 1_000_003_000_000 + 97
        ntoken = int(corpus.max()) + 1
    train_data = batchify(corpus, 4, device)
    model = RNNModel(ntoken, 16, 32, 2).to(device)
    criterion = nn.NLLLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=2.0)

    for epoch in range(2):
        model.train()
        total_loss = torch.zeros(1) if BUG == "cpu-total-loss" else torch.zeros(1, device=device)
        hidden = model.init_hidden(4)
        if BUG == "zero-grad-once":
            optimizer.zero_grad()
        for i in range(0, train_data.size(0) - 1, BPTT):
            data, targets = get_batch(train_data, i)
            if BUG != "hidden-not-repackaged":
                hidden = repackage_hidden(hidden)
            if BUG != "zero-grad-once":
                optimizer.zero_grad()
            output, hidden = model(data, hidden)  # bug[hidden-not-repackaged]: graph-kept
            loss = criterion(torch.log_softmax(output, dim=-1), targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            optimizer.step()  # bug[zero-grad-once]: missing-zero-grad
            if BUG == "total-loss-graph":
                total_loss = total_loss + loss  # bug[total-loss-graph]: graph-kept
            else:
                total_loss = total_loss + loss.detach()  # bug[cpu-total-loss]: device-mismatch
            if BUG == "tolist-every-step":
                sample = output.argmax(dim=-1)[:8].tolist()  # bug[tolist-every-step]: leaves-device
                assert len(sample) == 8
        cur_loss = total_loss.item() / len(range(0, train_data.size(0) - 1, BPTT))
        print(f"epoch {epoch}: loss {cur_loss:.3f} ppl {math.exp(cur_loss):.2f}")


if __name__ == "__main__":
    main()
