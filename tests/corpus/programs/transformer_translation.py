"""A sequence-to-sequence Transformer translator, modelled on the PyTorch tutorial "Language
Translation with nn.Transformer and torchtext" (``Seq2SeqTransformer``, ``TokenEmbedding``,
``create_mask``, teacher forcing with ``tgt_input = tgt[:-1]``), on a synthetic "reverse the
sentence" task with padding.

Bug variant (first argument):
- ``tgt-mask-on-cpu``: ``create_mask`` builds the causal target mask without ``device=``.
"""

import math
import sys

import torch
import torch.nn as nn

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""
PAD_IDX, BOS_IDX, EOS_IDX, VOCAB = 0, 1, 2, 12


class PositionalEncoding(nn.Module):
    def __init__(self, emb_size: int, dropout: float, maxlen: int = 50) -> None:
        super().__init__()
        den = torch.exp(-torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", pos_embedding.unsqueeze(-2))

    def forward(self, token_embedding: torch.Tensor) -> torch.Tensor:
        return self.dropout(token_embedding + self.pos_embedding[: token_embedding.size(0), :])


class Seq2SeqTransformer(nn.Module):
    def __init__(self, emb_size: int, nhead: int, vocab: int) -> None:
        super().__init__()
        self.transformer = nn.Transformer(
            d_model=emb_size,
            nhead=nhead,
            num_encoder_layers=1,
            num_decoder_layers=1,
            dim_feedforward=64,
            dropout=0.1,
        )
        self.generator = nn.Linear(emb_size, vocab)
        self.src_tok_emb = nn.Embedding(vocab, emb_size)
        self.tgt_tok_emb = nn.Embedding(vocab, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout=0.1)
        self.emb_size = emb_size

    def forward(self, src, trg, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask):
        src_emb = self.positional_encoding(self.src_tok_emb(src) * math.sqrt(self.emb_size))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg) * math.sqrt(self.emb_size))
        outs = self.transformer(  # bug[tgt-mask-on-cpu]: device-mismatch
            src_emb,
            tgt_emb,
            src_mask,
            tgt_mask,
            None,
            src_padding_mask,
            tgt_padding_mask,
            src_padding_mask,
        )
        return self.generator(outs)


def generate_square_subsequent_mask(sz: int, device: torch.device) -> torch.Tensor:
    if BUG == "tgt-mask-on-cpu":
        mask = (torch.triu(torch.ones((sz, sz))) == 1).transpose(0, 1)
    else:
        mask = (torch.triu(torch.ones((sz, sz), device=device)) == 1).transpose(0, 1)
    return ~mask


def create_mask(src, tgt, device):
    src_seq_len, tgt_seq_len = src.shape[0], tgt.shape[0]
    tgt_mask = generate_square_subsequent_mask(tgt_seq_len, device)
    src_mask = torch.zeros((src_seq_len, src_seq_len), device=device).bool()
    src_padding_mask = (src == PAD_IDX).transpose(0, 1)
    tgt_padding_mask = (tgt == PAD_IDX).transpose(0, 1)
    return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask


def make_batch(generator: torch.Generator, batch: int = 8):
    srcs, tgts = [], []
    for _ in range(batch):
        n = int(torch.randint(3, 7, (1,), generator=generator))
        words = torch.randint(3, VOCAB, (n,), generator=generator)
        srcs.append(torch.cat([torch.tensor([BOS_IDX]), words, torch.tensor([EOS_IDX])]))
        tgts.append(torch.cat([torch.tensor([BOS_IDX]), words.flip(0), torch.tensor([EOS_IDX])]))
    pad = nn.utils.rnn.pad_sequence
    return pad(srcs, padding_value=PAD_IDX), pad(tgts, padding_value=PAD_IDX)


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    generator = torch.Generator().manual_seed(1)
    model = Seq2SeqTransformer(32, 2, VOCAB).to(device)
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD_IDX)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)

    model.train()
    for step in range(6):
        src, tgt = make_batch(generator)
        src, tgt = src.to(device), tgt.to(device)
        tgt_input = tgt[:-1, :]
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input, device)
        logits = model(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask)
        optimizer.zero_grad()
        tgt_out = tgt[1:, :]
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
        loss.backward()
        optimizer.step()
        if step % 2 == 1:
            print(f"step {step}: loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
