"""How a tensor's metadata is written, in every place that shows it.

One spelling for the whole tool: findings (``x (4, 1) float32``), the Variables view and the
line tracer (``tensor<(4, 1) float32 cpu grad AddmmBackward0>``), the language server's hovers
and hints (``(4, 1)``). Imports no torch, so the language server and the CLI can use it without
loading torch; the functions that take a tensor only read its attributes. How a fix names a
device is :mod:`tensor_dap.device_fix`'s.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

_DTYPE_NAMES: dict[Any, str] = {}


def dim_text(size: Any) -> str:
    """``4``; a symbolic size (``j1``, ``s0``) stays as torch writes it."""
    try:
        return str(int(size))
    except Exception:
        return str(size)


def shape_text(dims: Iterable[Any]) -> str:
    """A shape as Python writes a tuple: ``()``, ``(6,)``, ``(64, 10)``, ``(3, j1)``."""
    texts = [dim_text(d) for d in dims]
    return f"({texts[0]},)" if len(texts) == 1 else f"({', '.join(texts)})"


def dtype_name(dtype: Any) -> str:
    """``torch.float32`` -> ``float32`` (cached per dtype: it runs for every tensor shown)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        text = str(dtype)
        name = text[len("torch.") :] if text.startswith("torch.") else text
        _DTYPE_NAMES[dtype] = name
    return name


def grad_fn_name(tensor: Any) -> Optional[str]:
    """``AddmmBackward0``, or None for a leaf or when ``grad_fn`` cannot be read."""
    try:
        fn = tensor.grad_fn
    except Exception:
        return None
    return type(fn).__name__ if fn is not None else None


def summary_text(
    shape: str,
    dtype: str,
    device: str,
    grad_fn: Optional[str],
    requires_grad: bool,
    markers: Iterable[str] = (),
) -> str:
    """``tensor<(4, 1) float32 cpu grad AddmmBackward0>``; ``markers`` (``sparse_coo``,
    ``nested``, ``fake``) go after the device."""
    parts = [shape, dtype, device, *markers]
    if grad_fn:
        parts.append(f"grad {grad_fn}")
    elif requires_grad:
        parts.append("grad")
    return f"tensor<{' '.join(parts)}>"


def size_text(nbytes: int) -> str:
    """``"12.0 MiB"``: bytes as a person reads them."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
