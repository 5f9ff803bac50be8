"""Arguments CUDA takes on the host: a packed sequence's lengths (``lengths.cpu()``, which
PyTorch requires) and batch sizes, CTC's targets and lengths on the CPU."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
embed, lstm = nn.Embedding(20, 8).to(device), nn.LSTM(8, 16, batch_first=True).to(device)
head = nn.Linear(16, 5).to(device)
params = [*embed.parameters(), *lstm.parameters(), *head.parameters()]
optimizer = torch.optim.Adam(params, lr=1e-2)
for step in range(3):
    lengths = torch.randint(2, 7, (4,), device=device)
    tokens = torch.randint(1, 20, (4, 6), device=device)
    packed = pack_padded_sequence(
        embed(tokens), lengths.cpu(), batch_first=True, enforce_sorted=False
    )
    assert packed.batch_sizes.device.type == "cpu" and packed.data.is_cuda
    out, _ = lstm(packed)
    padded, out_lengths = pad_packed_sequence(out, batch_first=True)
    assert out_lengths.device.type == "cpu" and padded.is_cuda
    log_probs = head(padded).log_softmax(2).transpose(0, 1)  # (T, N, C)
    targets = torch.randint(1, 5, (4, 2))  # on the CPU, as cuDNN's CTC wants them
    loss = F.ctc_loss(log_probs, targets, out_lengths, torch.full((4,), 2), zero_infinity=True)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step}: {loss.item():.4f}")
print("OK")
