"""Embeddings moved to the GPU after the optimizer was given them (TransE-style raw tensors).

`ent, rel = ent.to(device), rel.to(device)` after `torch.optim.SGD([ent, rel], ...)` rebinds
them to copies on the GPU: `optimizer.step()` updates the CPU originals, the loop keeps
computing with the copies, which never change. Gradients flow back through the copies, so
PyTorch says nothing; the loss stays where it started. On the CPU `.to("cpu")` returns the
tensor itself and the bug hides. The finding is at the copy, the line to fix; the debugger
pauses at the `optimizer.step()` that found it (`# pauses:`).
"""

import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)

n_entities, n_relations, dim = 100, 10, 16
ent = torch.randn(n_entities, dim).requires_grad_()
rel = torch.randn(n_relations, dim).requires_grad_()
optimizer = torch.optim.SGD([ent, rel], lr=0.1)
ent, rel = ent.to(device), rel.to(device)  # expect: stale-copy

heads = torch.randint(0, n_entities, (256,), device=device)
relations = torch.randint(0, n_relations, (256,), device=device)
tails = torch.randint(0, n_entities, (256,), device=device)

for epoch in range(5):
    distance = (ent[heads] + rel[relations] - ent[tails]).norm(dim=1)
    loss = distance.mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()  # pauses: stale-copy
    print(f"epoch {epoch}: loss {loss.item():.4f}")
