"""Text helpers shared by the features: positions in LSP units and short tensor summaries.

LSP positions count UTF-16 code units by default; the trace store's ``col`` is Python's
``end_col_offset``, a UTF-8 byte offset. Both are converted here, with a fast path for ASCII lines.
"""

from __future__ import annotations

from typing import Optional, Sequence

from tensor_dap.tensor_text import shape_text as shape_text  # one spelling: ``(6,)``
from tensor_dap.tracedb import Observation

_SHORT_DTYPES = {
    "float32": "f32",
    "float": "f32",
    "float16": "f16",
    "half": "f16",
    "bfloat16": "bf16",
    "float64": "f64",
    "double": "f64",
    "int64": "i64",
    "long": "i64",
    "int32": "i32",
    "int": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "bool",
    "complex64": "c64",
    "complex128": "c128",
    "float8_e4m3fn": "f8e4m3",
    "float8_e5m2": "f8e5m2",
}


def short_dtype(dtype: str) -> str:
    """``torch.float32`` / ``float32`` -> ``f32``; unknown dtypes keep their name."""
    name = dtype[len("torch.") :] if dtype.startswith("torch.") else dtype
    return _SHORT_DTYPES.get(name, name)


def has_grad(obs: Observation) -> bool:
    """Whether autograd tracks the value (a leaf that requires grad, or a graph node)."""
    return bool(obs.requires_grad or obs.grad_fn)


def summary(obs: Observation) -> str:
    """``(64, 10) f32 cuda:0 grad``: shape, short dtype, device, and ``grad`` when tracked; a
    module's or container's stored summary (``Sequential 161 params accel:0``)."""
    if obs.summary:
        return obs.summary
    text = f"{shape_text(obs.shape)} {short_dtype(obs.dtype)} {obs.device}"
    return f"{text} grad" if has_grad(obs) else text


def utf16_len(text: str) -> int:
    """The length of ``text`` in UTF-16 code units (LSP's default position encoding)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def byte_col_to_utf16(line: str, col: int) -> int:
    """The UTF-16 column of UTF-8 byte offset ``col`` in ``line``, clipped to the line."""
    if line.isascii():
        return max(0, min(col, len(line)))
    prefix = line.encode("utf-8")[: max(0, col)].decode("utf-8", errors="ignore")
    return utf16_len(prefix)


def line_at(lines: Sequence[str], index: int) -> Optional[str]:
    """Line ``index`` (0-based) without its line ending, or None past the end."""
    if 0 <= index < len(lines):
        return lines[index].rstrip("\r\n")
    return None
