"""Which torch API the user called when an op ran inside torch's own code: a tensor made while
``torch.load`` unpickles a checkpoint was *loaded* there, a parameter overwritten by
``load_state_dict`` was loaded at that line, a batch stacked by ``default_collate`` came from
the DataLoader — and a parameter re-wrapped by ``nn.Parameter``'s internal ``detach()`` after
``model.to(device)`` was moved by ``to``, not made by ``detach``.

Provenance uses this to say where a tensor came from in the words the user wrote. Only asked on
sampled ops whose caller is library code; answers are cached per code object.
"""

from __future__ import annotations

from types import FrameType
from typing import Optional

#: (function name, file ending) of the torch API the user called -> the name a message uses
_APIS = {
    ("load", "torch/serialization.py"): "torch.load",
    ("load_state_dict", "torch/nn/modules/module.py"): "load_state_dict",
    ("load_state_dict", "torch/optim/optimizer.py"): "load_state_dict",
    ("__next__", "torch/utils/data/dataloader.py"): "DataLoader",
}

#: ops torch's own code runs to re-wrap a tensor it already made (``nn.Parameter(t)`` detaches
#: ``t``): the result is the same data, so it keeps the provenance of its input
REWRAPPING = frozenset(["detach", "detach_", "requires_grad_", "_make_subclass", "as_subclass"])

_LABELS: dict[int, tuple[object, Optional[str]]] = {}


def api_called(caller: Optional[FrameType], user: Optional[FrameType]) -> Optional[str]:
    """The name of the torch API the user's frame ``user`` called that ran the op in library
    frame ``caller`` (``torch.load``, ``load_state_dict``, ``DataLoader``), if one is known."""
    frame = caller
    found = None
    while frame is not None and frame is not user:
        label = _label(frame)
        if label is not None:
            found = label  # the outermost one: what the user called
        frame = frame.f_back
    return found


def _label(frame: FrameType) -> Optional[str]:
    code = frame.f_code
    cached = _LABELS.get(id(code))
    if cached is None or cached[0] is not code:
        path = code.co_filename.replace("\\", "/")
        label = next(
            (
                name
                for (function, end), name in _APIS.items()
                if code.co_name == function and path.endswith(end)
            ),
            None,
        )
        cached = _LABELS[id(code)] = (code, label)
    return cached[1]
