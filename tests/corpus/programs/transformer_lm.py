"""A Transformer language model, modelled on pytorch/examples ``word_language_model``'s
``TransformerModel`` and the "Language Modeling with nn.Transformer" tutorial: the standard
sinusoidal ``PositionalEncoding`` (a registered buffer) and a causal mask from
``nn.Transformer.generate_square_subsequent_mask``.

Bug variants (first argument):
- ``pe-attribute``: the positional table kept as a plain attribute (``self.pe = pe``) instead
  of ``register_buffer``, so ``model.to(device)`` leaves it on the CPU.
- ``ppl-numpy``: the perplexity computed in NumPy from the per-token losses, copied to the host
  every step.
"""

import math
import sys

import numpy as np
import torch
import torch.nn as nn

from tensor_dap.testing import pick_device

BUG = sys.argv[1] if len(sys.argv) > 1 else ""
NTOKENS, SEQ = 16, 10


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 64) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        if BUG == "pe-attribute":
            self.pe = pe
        else:
            self.register_buffer("pe", pe)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (seq_len, batch, d_model)"""
        x = x + self.pe[: x.size(0)]  # bug[pe-attribute]: device-mismatch
        return self.dropout(x)


class TransformerModel(nn.Module):
    def __init__(self, ntoken: int, d_model: int, nhead: int, d_hid: int, nlayers: int) -> None:
        super().__init__()
        self.pos_encoder = PositionalEncoding(d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout=0.1)
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.embedding = nn.Embedding(ntoken, d_model)
        self.d_model = d_model
        self.linear = nn.Linear(d_model, ntoken)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        src = self.embedding(src) * math.sqrt(self.d_model)
        src = self.pos_encoder(src)
        output = self.transformer_encoder(src, src_mask, is_causal=True)
        return self.linear(output)


def main() -> None:
    torch.manual_seed(0)
    device = pick_device()
    stream = torch.arange(SEQ * 24 + 1) % NTOKENS
    data = stream[:-1].view(-1, SEQ).t().to(device)  # (SEQ, batch)
    targets = stream[1:].view(-1, SEQ).t().to(device)
    model = TransformerModel(NTOKENS, 32, 2, 64, 2).to(device)
    criterion = nn.CrossEntropyLoss()
    criterion_per_token = nn.CrossEntropyLoss(reduction="none")
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    src_mask = nn.Transformer.generate_square_subsequent_mask(SEQ).to(device)

    model.train()
    for step in range(6):
        optimizer.zero_grad()
        output = model(data, src_mask)
        loss = criterion(output.view(-1, NTOKENS), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        ppl = math.exp(loss.item())
        if BUG == "ppl-numpy":
            token_nll = criterion_per_token(output.detach().view(-1, NTOKENS), targets.reshape(-1))
            ppl = np.exp(token_nll.cpu().numpy().mean())  # bug[ppl-numpy]: leaves-device
        if step % 2 == 1:
            print(f"step {step}: loss {loss.item():.3f} ppl {float(ppl):.2f}")


if __name__ == "__main__":
    main()
