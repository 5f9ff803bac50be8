# tensor-dap: rules=all
"""A hand-rolled log-softmax that forgot the exp-sum: `log(x - max)` of non-positive numbers.

`x - x.max()` is finite but <= 0, so `torch.log` turns it into NaN (negative inputs) and -inf
(the maximum itself). PyTorch says nothing; the loss silently becomes nan. (The nan-inf rule is
opt-in, hence the rules comment on the first line.)
"""

import torch
import torch.nn.functional as F

device = torch.device("cuda:0")  # for a GPU; without one: tensor-dap check --simulate cuda

torch.cuda.manual_seed(0)
torch.manual_seed(0)

logits = torch.randn(8, 5, device=device)
targets = torch.randint(0, 5, (8,), device=device)

log_probs = torch.log(logits - logits.max(dim=1, keepdim=True).values)  # expect: nan-inf
loss = F.nll_loss(log_probs, targets)
print(f"loss: {loss.item()}")
