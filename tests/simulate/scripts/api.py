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
# memory budgets and nn.DataParallel read the device's properties; code seeds through
# torch.cuda.random and selects the device with a context manager
properties = torch.cuda.get_device_properties(0)
assert properties.total_memory > 2**30 and (properties.major, properties.minor) == (8, 0)
assert torch.cuda.initial_seed() == torch.initial_seed()
torch.cuda.random.manual_seed(0)
with torch.cuda.device(0):
    y = torch.ones(2, device="cuda")
with torch.cuda.device_of(y):
    assert torch.cuda.current_device() == 0

# kuangliu/pytorch-cifar: `if device == "cuda": net = torch.nn.DataParallel(net)`
net = torch.nn.DataParallel(torch.nn.Linear(4, 2).to(device))
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
for batch in (torch.randn(3, 4, device=device), torch.randn(3, 4)):  # (a CPU batch is copied)
    out = net(batch)
    assert out.device.type == "cuda" and out.shape == (3, 2)
    optimizer.zero_grad()
    out.sum().backward()
    optimizer.step()
assert net.module.weight.grad.device.type == "cuda"
# a GAN's generator loss goes back through a DataParallel discriminator: the gradient of the
# scattered input is gathered back
fake = torch.randn(3, 4, device=device, requires_grad=True)
net(fake).sum().backward()
assert fake.grad is not None and fake.grad.device.type == "cuda"

# eriklindernoren/PyTorch-GAN: `Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`
Tensor = torch.cuda.FloatTensor if torch.cuda.is_available() else torch.FloatTensor
valid = Tensor(4, 1).fill_(1.0)
z = Tensor([[0.5, -1.0]])
assert valid.is_cuda and z.is_cuda and z.dtype == torch.float32
assert valid.type() == "torch.cuda.FloatTensor" and isinstance(valid, torch.cuda.FloatTensor)
labels = torch.tensor([1.0, 0.0]).type(torch.cuda.LongTensor)
assert labels.is_cuda and labels.dtype == torch.int64 and not isinstance(labels, Tensor)
assert torch.ones(2).type("torch.cuda.HalfTensor").dtype == torch.float16
assert labels.type(torch.FloatTensor).device.type == "cpu"  # back to the host, as on a GPU
torch.set_default_tensor_type(torch.cuda.FloatTensor)  # older repos: every tensor on the GPU
assert torch.zeros(2).is_cuda and torch.zeros(2).dtype == torch.float32
torch.set_default_tensor_type(torch.FloatTensor)
# reproducibility helpers save and restore every device's RNG state around a block; logging
# reads the device's free memory and the allocator's statistics
with torch.random.fork_rng():
    first = torch.rand(2, device="cuda")
assert torch.equal(torch.rand(2, device="cuda"), first)
state = torch.cuda.get_rng_state()
assert state.dtype == torch.uint8 and len(torch.cuda.get_rng_state_all()) == 1
torch.cuda.set_rng_state(state)
free, total = torch.cuda.mem_get_info()
assert total == properties.total_memory and 0 < free <= total
stats = torch.cuda.memory_stats()
assert stats["allocated_bytes.all.current"] == torch.cuda.memory_allocated()
assert "MiB" in torch.cuda.memory_summary()
print("OK")
