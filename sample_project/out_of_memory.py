"""An embedding table sized by the largest raw id: it cannot be allocated.

The item ids are ISBN-13 numbers (about 9.78e12) used as indices without mapping them to
0..N-1 first, so `nn.Embedding(max_id + 1, 64)` asks for petabytes. PyTorch raises
`torch.OutOfMemoryError` on CUDA, a RuntimeError from the CPU allocator elsewhere, and the
tensors that were alive are gone by the time the traceback prints. tensor-dap (rule
`out-of-memory`, on by default) stops at the line while they are still there, naming the lines
that made the memory held; continuing lets the error go on. The fix: map the ids to
0..N-1 (`torch.unique(item_ids, return_inverse=True)`).
"""

import torch
import torch.nn as nn

# a GPU when there is one (on a laptop: tensor-dap check --simulate cuda)
use_cuda = torch.cuda.is_available()
device = torch.device("cuda" if use_cuda else "cpu")
torch.manual_seed(0)

item_ids = torch.tensor([9780131103627, 9780262035613, 9781492032649, 9780596517748])
ratings = torch.randn(len(item_ids), device=device)
history = torch.randn(1024, 256, device=device)

max_id = int(item_ids.max())
items = nn.Embedding(max_id + 1, 64, device=device)  # expect: out-of-memory
print(items(item_ids.to(device)).shape)
