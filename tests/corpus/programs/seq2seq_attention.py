"""A GRU encoder and an attention decoder, modelled on the PyTorch tutorial "NLP From Scratch:
Translation with a Sequence to Sequence Network and Attention" (``EncoderRNN``,
``BahdanauAttention``, ``AttnDecoderRNN``), with padded batches and teacher forcing.

Bug variants (first argument):
- ``mask-after-softmax``: the padding positions are zeroed with ``masked_fill_`` on the
  attention weights after the softmax, which saved them for backward.
- ``sos-on-cpu``: the start-of-sentence decoder input made with ``torch.full`` without
  ``device=``, so the decoder's embedding meets CPU indices.
- ``per-sequence-broadcast``: each sentence's summed token loss divided by
  ``seq_lengths[:, None]`` (the masked-mean idiom for ``(B, T, D)`` features): ``(B,) / (B, 1)``
  is ``(B, B)``, every sentence's total divided by every length.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""
SOS, PAD, VOCAB, HIDDEN, MAX_LEN = 1, 0, 10, 24, 6


class EncoderRNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, HIDDEN)
        self.gru = nn.GRU(HIDDEN, HIDDEN, batch_first=True)

    def forward(self, input):
        return self.gru(self.embedding(input))


class BahdanauAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.Wa = nn.Linear(HIDDEN, HIDDEN)
        self.Ua = nn.Linear(HIDDEN, HIDDEN)
        self.Va = nn.Linear(HIDDEN, 1)

    def forward(self, query, keys, pad_mask):
        scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys)))
        scores = scores.squeeze(2).unsqueeze(1)
        if BUG == "mask-after-softmax":
            weights = F.softmax(scores, dim=-1)
            weights.masked_fill_(pad_mask[:, None], 0.0)  # bug[mask-after-softmax]: inplace-saved
        else:
            weights = F.softmax(scores.masked_fill(pad_mask.unsqueeze(1), -1e9), dim=-1)
        context = torch.bmm(weights, keys)
        return context, weights


class AttnDecoderRNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, HIDDEN)
        self.attention = BahdanauAttention()
        self.gru = nn.GRU(2 * HIDDEN, HIDDEN, batch_first=True)
        self.out = nn.Linear(HIDDEN, VOCAB)

    def forward_step(self, input, hidden, encoder_outputs, pad_mask):
        embedded = self.embedding(input)  # bug[sos-on-cpu]: device-mismatch
        query = hidden.permute(1, 0, 2)
        context, _ = self.attention(query, encoder_outputs, pad_mask)
        output, hidden = self.gru(torch.cat((embedded, context), dim=2), hidden)
        return self.out(output), hidden


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    lengths = torch.randint(3, MAX_LEN + 1, (8,))
    src = torch.randint(2, VOCAB, (8, MAX_LEN))
    src[torch.arange(MAX_LEN) >= lengths.unsqueeze(1)] = PAD
    tgt = src.clone()
    src, tgt = src.to(device), tgt.to(device)
    pad_mask = src == PAD
    encoder, decoder = EncoderRNN().to(device), AttnDecoderRNN().to(device)
    params = list(encoder.parameters()) + list(decoder.parameters())
    optimizer = torch.optim.Adam(params, lr=0.01)
    criterion = nn.NLLLoss(ignore_index=PAD, reduction="none")  # per token: 0 at padding
    seq_lengths = lengths.to(device).float()

    for epoch in range(4):
        optimizer.zero_grad()
        encoder_outputs, hidden = encoder(src)
        if BUG == "sos-on-cpu":
            decoder_input = torch.full((8, 1), SOS, dtype=torch.long)
        else:
            decoder_input = torch.full((8, 1), SOS, dtype=torch.long, device=device)
        token_nll = torch.zeros(8, MAX_LEN, device=device)
        for i in range(MAX_LEN):
            out, hidden = decoder.forward_step(decoder_input, hidden, encoder_outputs, pad_mask)
            log_probs = F.log_softmax(out.squeeze(1), dim=-1)
            token_nll[:, i] = criterion(log_probs, tgt[:, i])
            decoder_input = tgt[:, i].unsqueeze(1)  # teacher forcing
        totals = token_nll.sum(1)
        if BUG == "per-sequence-broadcast":
            seq_nll = totals / seq_lengths[:, None]  # bug[per-sequence-broadcast]: broadcast
        else:
            seq_nll = totals / seq_lengths
        loss = seq_nll.mean()
        loss.backward()
        optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
