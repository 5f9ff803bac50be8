"""An ``nn.Module``: class, parameter count, devices, dtypes, train/eval; then its submodules,
own parameters and buffers (each rendered again), and the ordinary attributes under ``(raw)``."""

from __future__ import annotations

from typing import Any

from tensor_dap.render.base import Entry, Raw, Text, safe
from tensor_dap.tensor_text import dtype_name


def _facts(module: Any) -> tuple[int, int, list[str], list[str]]:
    """(parameters, trainable, devices, dtypes), metadata only."""
    total = trainable = 0
    devices: dict[str, None] = {}
    dtypes: dict[str, None] = {}
    none: list[Any] = []
    for param in safe(lambda: list(module.parameters()), none):
        count, requires_grad, device, dtype = _param_facts(param)
        total += count
        if requires_grad:
            trainable += count
        devices[device] = None
        dtypes[dtype] = None
    return total, trainable, list(devices), list(dtypes)


def _param_facts(param: Any) -> tuple[int, bool, str, str]:
    """(elements, requires_grad, device, dtype) of one parameter; ``?`` where unreadable."""
    return (
        safe(param.numel, 0),
        safe(lambda: bool(param.requires_grad), False),
        safe(lambda: str(param.device), "?"),
        safe(lambda: dtype_name(param.dtype), "?"),
    )


def _count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def _mode(module: Any) -> str:
    training = safe(lambda: module.training, None)
    return "?" if training is None else ("train" if training else "eval")


def value_line(module: Any) -> str:
    """``Linear(1.2K params, cpu, float32, train)``."""
    try:
        total, _, devices, dtypes = _facts(module)
        parts = [f"{_count(total)} params"] + devices + dtypes + [_mode(module)]
        return f"{type(module).__name__}({', '.join(parts)})"
    except Exception:
        return f"{safe(lambda: type(module).__name__, 'Module')}(?)"


def children(module: Any) -> list[Entry]:
    total, trainable, devices, dtypes = _facts(module)
    entries = [
        Entry("class", Text(safe(lambda: type(module).__qualname__, "?"))),
        Entry("parameters", Text(f"{total:,} ({trainable:,} trainable)")),
        Entry("devices", Text(", ".join(devices) or "none")),
        Entry("dtypes", Text(", ".join(dtypes) or "none")),
        Entry("mode", Text(_mode(module)), ".training"),
    ]
    none: list[tuple[str, Any]] = []
    for name, child in safe(lambda: list(module.named_children()), none):
        entries.append(Entry(name, child, _suffix(module, name, "_modules")))
    own = [
        *safe(lambda: list(module.named_parameters(recurse=False)), none),
        *safe(lambda: list(module.named_buffers(recurse=False)), none),
    ]
    for name, tensor in own:
        table = "_parameters" if name in safe(lambda: module._parameters, {}) else "_buffers"
        entries.append(Entry(name, tensor, _suffix(module, name, table)))
    entries.append(Entry("(raw)", Raw(module)))
    return entries


def _suffix(module: Any, name: str, table: str) -> str:
    """What reads child ``name`` from the module's expression: ``.fc``; a layer of an
    ``nn.Sequential`` / ``nn.ModuleList`` as users index it, ``[0]``; any other name through
    the module's own table, ``._modules['a-b']``. A child without one has no ``evaluateName``,
    nor do its children: VS Code offers no "Break on Value Change" on ``model[0].weight``."""
    if name.isidentifier():
        return f".{name}"
    if table == "_modules" and name.isdigit() and safe(lambda: _by_position(module, name), False):
        return f"[{name}]"
    return f".{table}[{name!r}]"


def _by_position(module: Any, name: str) -> bool:
    """Whether ``module[int(name)]`` is the child named ``name``."""
    from torch import nn

    if not isinstance(module, (nn.Sequential, nn.ModuleList)):
        return False
    return bool(module[int(name)] is module._modules[name])
