"""A ``torch.optim`` optimizer: class, param groups (settings, number of params), state size."""

from __future__ import annotations

from typing import Any

from tensor_dap.render.base import Entry, Raw, Text, plural, safe


def value_line(optimizer: Any) -> str:
    """``SGD(1 group, 4 params, lr=0.01)``."""
    try:
        groups = list(optimizer.param_groups)
        params = sum(len(g.get("params", ())) for g in groups)
        parts = [plural(len(groups), "group"), plural(params, "param")]
        lrs = {str(g.get("lr")) for g in groups if "lr" in g}
        if len(lrs) == 1:
            parts.append(f"lr={lrs.pop()}")
        return f"{type(optimizer).__name__}({', '.join(parts)})"
    except Exception:
        return f"{safe(lambda: type(optimizer).__name__, 'Optimizer')}(?)"


def _setting(value: Any) -> str:
    text = safe(lambda: repr(value), "?")
    return text if len(text) <= 40 else text[:37] + "..."


def _param_count(group: dict[str, Any]) -> int:
    return safe(lambda: len(group.get("params", ())), 0)


def children(optimizer: Any) -> list[Entry]:
    entries = [Entry("class", Text(safe(lambda: type(optimizer).__qualname__, "?")))]
    none: list[dict[str, Any]] = []
    groups = safe(lambda: list(optimizer.param_groups), none)
    for index, group in enumerate(groups):
        params = _param_count(group)
        settings = [f"{k}={_setting(v)}" for k, v in group.items() if k != "params"]
        text = ", ".join([plural(params, "param"), *settings])
        entries.append(Entry(f"param group {index}", Text(text), f".param_groups[{index}]"))
    state = safe(lambda: len(optimizer.state), 0)
    entries.append(Entry("state", Text(f"{plural(state, 'param')} with state"), ".state"))
    entries.append(Entry("(raw)", Raw(optimizer)))
    return entries
