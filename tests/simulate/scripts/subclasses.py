"""The program's own tensor subclasses on CUDA: a wrapper subclass made on the device of the
tensor it wraps (a logging tensor), and subclasses made with ``as_subclass`` (units-carrying
tensors, torchvision's tv_tensors), with and without a ``__torch_function__`` of their own."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._pytree import tree_map

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)


class LoggingTensor(torch.Tensor):
    @staticmethod
    def __new__(cls, elem):
        made = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), dtype=elem.dtype, device=elem.device
        )
        made.elem = elem
        return made

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def unwrap(value):
            return value.elem if isinstance(value, LoggingTensor) else value

        def wrap(value):
            return LoggingTensor(value) if isinstance(value, torch.Tensor) else value

        return tree_map(wrap, func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {})))


class Meters(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


class Tagged(torch.Tensor):
    pass


class Labelled(torch.Tensor):
    """A metadata-carrying subclass made the usual way, in its ``__new__``."""

    @staticmethod
    def __new__(cls, data, label="raw"):
        made = torch.Tensor._make_subclass(cls, data, data.requires_grad)
        made.label = label
        return made


net = nn.Linear(4, 2).to(device)
x, y = torch.randn(8, 4, device=device), torch.randint(0, 2, (8,), device=device)
out = net(LoggingTensor(x))
loss = F.cross_entropy(out, y)
loss.backward()
assert isinstance(out, LoggingTensor) and net.weight.grad is not None

for kind in (Meters, Tagged):
    m = x.as_subclass(kind)
    assert type(m).__name__ == kind.__name__ and isinstance(m, kind)
    assert m.device.type == device.type
    doubled = (m * 2).sum(1)
    assert isinstance(doubled, kind) and doubled.device.type == device.type
    on_host = doubled.cpu()
    assert isinstance(on_host, kind) and on_host.device.type == "cpu"
    assert torch.allclose(on_host.as_subclass(torch.Tensor), (x * 2).sum(1).cpu())
labelled = Labelled(net.weight, "weights")
assert labelled.label == "weights" and labelled.requires_grad
assert labelled.device.type == device.type
assert isinstance(labelled * 2, Labelled)
# torch's own wrapper subclass: a jagged nested tensor of device values through a layer
nested = torch.nested.nested_tensor(
    [torch.ones(2, 4, device=device), torch.ones(3, 4, device=device)], layout=torch.jagged
)
padded = net(nested * 2).to_padded_tensor(0.0)
assert padded.shape == (2, 3, 2) and padded.device.type == device.type
padded.sum().backward()
print("OK")
