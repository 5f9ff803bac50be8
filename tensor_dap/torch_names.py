"""Names of torch functions that more than one part of tensor-dap needs to recognise.

Plain strings, no torch import: the language server reads source text with them (it never
imports torch), the agent's rules compare them with the op names it sees.
"""

from __future__ import annotations

#: torch functions (and legacy tensor types) that make a new tensor, on the CPU unless told
#: otherwise: a tensor one of them made can be made on the right device at once
#: (``device=``); the device rules' fix says so
TENSOR_FACTORIES = frozenset(
    [
        "zeros",
        "ones",
        "empty",
        "full",
        "tensor",
        "Tensor",
        "as_tensor",
        "arange",
        "linspace",
        "rand",
        "randn",
        "randint",
        "zeros_like",
        "ones_like",
        "eye",
        "from_numpy",
        "FloatTensor",
        "LongTensor",
    ]
)

#: Tensor methods that change a tensor's dtype and keep its device: ``torch.zeros(3).float()``
#: is still a fresh tensor where its factory put it
DTYPE_CONVERSIONS = frozenset(["float", "double", "half", "long", "int"])
