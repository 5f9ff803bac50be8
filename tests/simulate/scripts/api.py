"""torch.cuda's questions and housekeeping, answered by the simulation."""

import torch

assert torch.cuda.is_available()
assert torch.cuda.device_count() == 1
assert torch.cuda.current_device() == 0
assert "simulated" in torch.cuda.get_device_name(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
torch.cuda.manual_seed(0)
torch.cuda.manual_seed_all(0)
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = False
torch.backends.cuda.matmul.allow_tf32 = True
torch.cuda.set_device(0)
before = torch.cuda.memory_allocated()
x = torch.empty(1024, 256, device="cuda:0")  # 1 MiB
assert torch.cuda.memory_allocated() - before == 1024 * 256 * 4, torch.cuda.memory_allocated()
peak = torch.cuda.max_memory_allocated()
del x
assert torch.cuda.memory_allocated() == before
assert torch.cuda.max_memory_allocated() == peak >= 1024 * 256 * 4
torch.cuda.synchronize()
torch.cuda.empty_cache()
# torch <= 2.12's Adam/AdamW ask it at every step(), SyncBatchNorm at every forward
assert torch.cuda.is_current_stream_capturing() is False
print("OK")
