"""A tensor as a picture for an editor's "View Tensor" panel: a heatmap or an RGB image of one
slice, downsampled where the tensor lives, plus a histogram and NaN/Inf counts.

:func:`picture` returns a JSON-able dict, :func:`encode` the same as JSON text (what a debugger
evaluates in the paused frame: ``__import__('tensor_dap.render.picture',
fromlist=['encode']).encode(x)``, with DAP ``evaluate`` context ``clipboard`` and ``format:
{rawString: true}`` so that debugpy returns the text whole and unquoted).

What is drawn:

- 0-d and 1-d: a heatmap one row high (a strip); 2-d: a heatmap;
- more dims: ``(..., 3, H, W)`` or ``(..., H, W, 3)`` is an RGB image of the first slice, anything
  else a heatmap of the last two dims of the first slice (``x[0, 0, :, :]``);
- the slice is reduced ON ITS DEVICE to at most :data:`MAX_VALUES` numbers (a strided view first
  when it is far larger, then an average over blocks), so only those cross to the CPU, as float32.

The histogram (:data:`BINS` bins over the finite values), min/max and NaN/Inf counts cover the
whole tensor, or a strided sample of :data:`~tensor_dap.render.stats.FULL_LIMIT` elements when it
is larger. Two transfers to the CPU in all (the range, then the values and counts).

Never disturbs the debuggee: under ``torch.no_grad()`` with ``__torch_function__`` disabled (no
rule fires, no graph), on a ``detach()``ed alias (version counter, ``requires_grad`` and
``grad_fn`` untouched), keeps no reference. Tensors that cannot be drawn (sparse, meta, fake,
nested, quantized, empty, not a tensor) give ``{"error": ...}``; nothing here raises.
"""

from __future__ import annotations

import array
import base64
import json
import math
import sys
from typing import Any, Optional

import torch

from tensor_dap.render.base import safe
from tensor_dap.render.layout import without_values
from tensor_dap.render.stats import FULL_LIMIT, sample
from tensor_dap.tensor_text import dtype_name

FORMAT = 1
MAX_VALUES = 65_536
BINS = 64
PREPOOL_FACTOR = 16
"""A slice over ``MAX_VALUES * PREPOOL_FACTOR`` elements is first thinned by a strided view."""


def encode(obj: Any, max_values: int = MAX_VALUES, bins: int = BINS) -> str:
    """:func:`picture` as compact JSON text."""
    try:
        return json.dumps(picture(obj, max_values, bins), separators=(",", ":"), allow_nan=False)
    except Exception as error:  # the dict itself could not be written
        return json.dumps({"format": FORMAT, "error": _describe(error)})


def picture(obj: Any, max_values: int = MAX_VALUES, bins: int = BINS) -> dict[str, Any]:
    """The picture of ``obj`` (a tensor, or a NumPy array) as a JSON-able dict."""
    try:
        tensor = _as_tensor(obj)
        if tensor is None:
            return {"format": FORMAT, "error": f"not a tensor: {type(obj).__name__}"}
        out = _metadata(tensor)
        with torch.no_grad(), torch._C.DisableTorchFunction():
            reason = _cannot_draw(tensor)
            if reason:
                out["error"] = reason
                return out
            out.update(_draw(tensor.detach(), max_values, bins))
        return out
    except Exception as error:
        return {"format": FORMAT, "error": _describe(error)}


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:300] if text else ''}".rstrip(": ")


def _as_tensor(obj: Any) -> Optional[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return obj
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(obj, numpy.ndarray):
        try:
            return torch.from_numpy(obj)  # shares memory, no copy
        except (TypeError, ValueError):
            return None
    return None


def _metadata(tensor: torch.Tensor) -> dict[str, Any]:
    unknown: list[int] = []
    return {
        "format": FORMAT,
        "shape": safe(lambda: [int(n) for n in tensor.shape], unknown),
        "dtype": safe(lambda: dtype_name(tensor.dtype), "?"),
        "device": safe(lambda: str(tensor.device), "?"),
    }


_CANNOT_DRAW = {
    "fake": "fake tensor: no data to draw",
    "meta": "meta tensor: no data to draw",
    "nested": "nested tensor: not drawn",
    "quantized": "quantized tensor: not drawn (convert with .dequantize())",
    "empty": "empty tensor: nothing to draw",
}


def _cannot_draw(tensor: torch.Tensor) -> Optional[str]:
    kind = without_values(tensor)
    if kind is None:
        return None
    return _CANNOT_DRAW.get(kind, f"{kind} layout: not drawn (convert with .to_dense())")


# -- the slice -------------------------------------------------------------------------------


def choose_slice(shape: list[int]) -> tuple[tuple[int, ...], str]:
    """Leading indices that pick the drawn slice, and the layout: ``heatmap``, ``chw`` or ``hwc``.

    >>> choose_slice([8, 3, 32, 32])
    ((0,), 'chw')
    >>> choose_slice([2, 5, 7])
    ((0,), 'heatmap')
    """
    rank = len(shape)
    if rank >= 3 and shape[-3] == 3:
        return (0,) * (rank - 3), "chw"
    if rank >= 3 and shape[-1] == 3:
        return (0,) * (rank - 3), "hwc"
    return (0,) * max(0, rank - 2), "heatmap"


def pool_factors(height: int, width: int, limit: int) -> tuple[int, int]:
    """Block sizes ``(fh, fw)`` so that ``ceil(h/fh) * ceil(w/fw) <= limit``, square-ish blocks."""
    limit = max(1, limit)
    if height * width <= limit:
        return 1, 1
    f = max(1, math.ceil(math.sqrt(height * width / limit)))
    fh, fw = min(f, height), min(f, width)
    out_h = math.ceil(height / fh)
    if out_h * math.ceil(width / fw) > limit:
        fw = math.ceil(width / max(1, limit // out_h))
    out_w = math.ceil(width / fw)
    if out_h * out_w > limit:
        fh = math.ceil(height / max(1, limit // out_w))
    return fh, fw


def _plane(tensor: torch.Tensor) -> tuple[torch.Tensor, str, str]:
    """The slice as ``(C, H, W)`` (C = 1 or 3), its layout, and the index text (``[0, :, :]``)."""
    shape = list(tensor.shape)
    lead, layout = choose_slice(shape)
    view = tensor[lead] if lead else tensor
    if view.dim() == 0:
        view = view.reshape(1, 1)
    elif view.dim() == 1:
        view = view.reshape(1, -1)
    if layout == "hwc":
        view = view.permute(2, 0, 1)
    elif layout == "heatmap":
        view = view.unsqueeze(0)
    rest = max(0, len(shape) - len(lead))
    text = "[" + ", ".join([str(i) for i in lead] + [":"] * rest) + "]" if lead else ""
    return view, layout, text


def _reduce(plane: torch.Tensor, max_values: int) -> tuple[torch.Tensor, list[int]]:
    """``plane`` (C, H, W) averaged over blocks, on its device, to at most ``max_values``."""
    channels, height, width = plane.shape
    fh, fw = pool_factors(height, width, max(1, max_values // channels))
    work = plane
    # thin far larger slices with a strided view first, so the float copy below stays bounded
    sh = max(1, fh // math.isqrt(PREPOOL_FACTOR)) if fh > 1 else 1
    sw = max(1, fw // math.isqrt(PREPOOL_FACTOR)) if fw > 1 else 1
    if sh > 1 or sw > 1:
        work = work[:, ::sh, ::sw]
        fh, fw = math.ceil(fh / sh), math.ceil(fw / sw)
    if work.is_complex():
        work = work.abs()
    dtype = torch.float64 if work.dtype is torch.float64 else torch.float32
    work = work.to(dtype)
    if fh > 1 or fw > 1:
        work = torch.nn.functional.avg_pool2d(
            work.unsqueeze(0), (fh, fw), stride=(fh, fw), ceil_mode=True
        ).squeeze(0)
    return work, [fh * sh, fw * sw]


# -- histogram and counts --------------------------------------------------------------------


def _values_for_stats(tensor: torch.Tensor) -> tuple[torch.Tensor, bool]:
    values = tensor
    if values.numel() > FULL_LIMIT:
        values = sample(values, FULL_LIMIT)
    values = values.reshape(-1)
    if values.is_complex():
        values = values.abs()
    if not values.is_floating_point():
        values = values.to(torch.float32)  # ints, bool: a bounded copy (sampled above)
    return values, values.numel() < tensor.numel()


def _draw(tensor: torch.Tensor, max_values: int, bins: int) -> dict[str, Any]:
    plane, layout, picked = _plane(tensor)
    pixels, block = _reduce(plane, max_values)
    channels, height, width = pixels.shape

    values, sampled = _values_for_stats(tensor)
    if values.dtype not in (torch.float32, torch.float64):
        values = values.to(torch.float32)  # half types: exact in float32, and histc takes them
    finite = torch.isfinite(values)
    # from the tensor itself, not ``device=values.device``: a subclass's Python ``.device`` (the
    # simulated ``cuda:0`` of ``--simulate cuda``) need not be the device its data is on
    inf = values.new_full((), math.inf)
    scalars = torch.stack(
        [
            torch.where(finite, values, inf).amin(),
            torch.where(finite, values, -inf).amax(),
            # counts of at most FULL_LIMIT (< 2**24) elements: exact in float32
            torch.isnan(values).sum().to(values.dtype),
            (values == inf).sum().to(values.dtype),
            (values == -inf).sum().to(values.dtype),
        ]
    )
    low, high, nans, posinf, neginf = scalars.cpu().tolist()  # transfer 1: the range
    has_finite = math.isfinite(low) and math.isfinite(high)
    counts: Optional[torch.Tensor] = None
    if has_finite:
        lo, hi = (low, high) if high > low else (low - 0.5, high + 0.5)
        kept = torch.nan_to_num(values, nan=-math.inf, posinf=-math.inf, neginf=-math.inf)
        counts = torch.histc(kept, bins=bins, min=lo, max=hi)  # -inf: outside, not counted
    else:
        lo = hi = 0.0

    # picture pixels as H, W, C (channels last), then the histogram counts: transfer 2
    flat = pixels.permute(1, 2, 0).reshape(-1).to(torch.float32)
    parts = [flat] if counts is None else [flat, counts.to(flat)]  # flat's device and dtype
    host = torch.cat(parts).cpu() if len(parts) > 1 else flat.cpu()
    pixel_values = host[: flat.numel()].contiguous()
    hist = [int(c) for c in host[flat.numel() :].tolist()] if counts is not None else []

    return {
        "kind": "heatmap" if layout == "heatmap" else "image",
        "layout": layout,
        "slice": picked,
        "height": int(height),
        "width": int(width),
        "channels": int(channels),
        "block": block,
        "values": base64.b64encode(_little_endian(pixel_values)).decode("ascii"),
        "min": low if has_finite else None,
        "max": high if has_finite else None,
        "nan": int(nans),
        "posinf": int(posinf),
        "neginf": int(neginf),
        "count": int(values.numel()),
        "sampled": bool(sampled),
        "histogram": {"bins": len(hist), "lo": lo, "hi": hi, "counts": hist},
        **({"magnitude": True} if tensor.is_complex() else {}),
    }


def _little_endian(values: torch.Tensor) -> bytes:
    out = array.array("f", values.tolist())
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes()
