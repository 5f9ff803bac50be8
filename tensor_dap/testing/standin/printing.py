"""How a stand-in tensor prints: ``tensor([1., 2.], device='accel:0')``, as a CUDA tensor would.

``torch._tensor_str`` prints a tensor subclass under its class name; :func:`tensor_repr` follows
its dense path instead, formatting the CPU data directly, and adds the suffixes (device, dtype,
``grad_fn``, ``requires_grad``) PyTorch adds for a tensor on a device.  It leans on two private
helpers of ``torch._tensor_str``, which have no annotations; their types are declared here.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
import torch._tensor_str

__all__ = ["tensor_repr"]

# (tensor, indent) -> the formatted data, as ``repr`` shows it
_format_data: Callable[[torch.Tensor, int], str] = torch._tensor_str._tensor_str
# (text, suffixes, indent, force_newline) -> text with ``, suffix`` parts, wrapped as repr wraps
_add_suffixes: Callable[[str, list[str], int, bool], str] = torch._tensor_str._add_suffixes


def tensor_repr(tensor: torch.Tensor, elem: torch.Tensor, tensor_contents: Optional[str]) -> str:
    """The repr of ``tensor`` (a stand-in tensor) whose data is the CPU tensor ``elem``.

    ``tensor_contents`` replaces the formatted data, as in ``torch.Tensor.__repr__``.
    """
    with torch._C.DisableTorchFunction(), torch.no_grad():
        prefix = "tensor("
        indent = len(prefix)
        suffixes = [f"device='{tensor.device}'"]
        complex_default = (
            torch.cdouble if torch.get_default_dtype() == torch.double else torch.cfloat
        )
        default_dtypes = (torch.get_default_dtype(), complex_default, torch.int64, torch.bool)
        if tensor_contents is not None:
            body = tensor_contents
        elif elem.numel() == 0:
            body = "[]"
            if elem.dim() != 1:
                suffixes.append(f"size={tuple(elem.shape)}")
            if elem.dtype != torch.get_default_dtype():
                suffixes.append(f"dtype={elem.dtype}")
        else:
            if elem.dtype not in default_dtypes:
                suffixes.append(f"dtype={elem.dtype}")
            body = _format_data(elem, indent)
        grad_fn = tensor.grad_fn
        if grad_fn is not None:
            name = type(grad_fn).__name__
            if name == "CppFunction":
                name = grad_fn.name().rsplit("::", 1)[-1]
            suffixes.append(f"grad_fn=<{name}>")
        elif tensor.requires_grad:
            suffixes.append("requires_grad=True")
        text = _add_suffixes(prefix + body, suffixes, indent, False)
    if getattr(tensor, "_is_param", False):
        return "Parameter containing:\n" + text
    return text
