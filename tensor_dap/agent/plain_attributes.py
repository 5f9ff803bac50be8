"""A module's tensor kept as a plain attribute, which ``model.to(device)`` leaves behind.

``self.mask = torch.tril(torch.ones(T, T))`` in ``__init__`` (minGPT's causal mask, a
positional table, a class-weight vector) is no parameter and no buffer: ``model.to("cuda")``,
``model.cuda()`` and ``model.half()`` move parameters and buffers only, so the forward meets it
on the CPU: ``att.masked_fill(self.mask[:, :, :T, :T] == 0, ...)`` raises a device mismatch
whose operand is the comparison, made on the failing line. Moving that operand with
``.to(device)`` at every call is the wrong fix; registering the tensor as a buffer is the right
one. :func:`held` finds, for device-mismatch's operands, the plain attribute of the calling
module each one was computed from (the attribute itself, a view sharing its storage, or a
result its creation record leads back to), and :func:`explained` says so.
"""

from __future__ import annotations

import dis
import linecache
import os
import re
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any, Optional

import torch

from tensor_dap.agent import frames, naming
from tensor_dap.agent.provenance import Prov
from tensor_dap.torch_names import LEARNED_INITIAL_VALUES, LEARNED_TENSOR_NAME

_Tensor = torch.Tensor
#: creation records walked back from an operand to find the attribute's
_ANCESTORS = 24
#: frames looked at for a module whose attribute the operand is, from the user's frame up
_FRAMES = 4


@dataclass(frozen=True)
class PlainAttribute:
    """``self.mask`` of a ``CausalSelfAttention``, made at ``model.py:12`` (when known)."""

    name: str
    attribute: str
    owner: str
    made_at: Optional[str]
    #: the module has no parameter or buffer (a loss module): it moves once it has one
    bare: bool = False
    #: meant to be learned (made with ``requires_grad=True``, or named as learned tensors are:
    #: ``cls_token``): ``nn.Parameter(...)`` is the fix
    learned: bool = False
    #: the module's other plain tensor attributes on the CPU (``self.betas`` beside the
    #: ``self.sqrt_alphas_cumprod`` a diffusion schedule reads first): the next mismatches
    others: tuple[str, ...] = ()


def held(operands: list[Any], caller: Any, state: Any) -> dict[int, PlainAttribute]:
    """``id(operand)`` -> the plain attribute of a calling module it comes from, for the CPU
    operands that come from one: the ``self`` of the user's frame or of the few frames above
    it (``attend(att, self.mask, T)`` in a helper function), a module whose parameters or
    buffers were moved off the CPU (an unmoved model's fix is to move it) or that has none,
    and an attribute made before this call (``self.last_input = x`` in the forward keeps the
    batch: the batch is the culprit)."""
    provenance = getattr(state, "provenance", None)
    cpu_operands = [t for t in operands if isinstance(t, _Tensor) and t.is_cpu]
    found: dict[int, PlainAttribute] = {}
    frame = frames.user_frame(caller)
    for _ in range(_FRAMES):
        if frame is None or len(found) == len(cpu_operands):
            break
        if frames.is_user_code(frame.f_code):
            owner = frames.read_locals(frame).get("self")
            module = owner if isinstance(owner, torch.nn.Module) else None
            held_tensors = (
                [*module.parameters(), *module.buffers()][:64] if module is not None else []
            )
            # (moved off the CPU, or with nothing to move: a loss module)
            if module is not None and (not held_tensors or any(not t.is_cpu for t in held_tensors)):
                for operand in cpu_operands:
                    if id(operand) not in found:
                        bare = not held_tensors and not _moved_by_the_program(module, frame)
                        attribute = _attribute_of(module, operand, frame, provenance, bare=bare)
                        if attribute is not None:
                            found[id(operand)] = attribute
        frame = frame.f_back
    return found


def _moved_by_the_program(module: torch.nn.Module, frame: FrameType) -> bool:
    """Whether the program's files on the stack move a module of this class already
    (``diff = Diffusion().to(device)``, or ``diff.to(device)`` of a name bound to one): then
    advice to move it too would send the reader to a line that is already right."""
    owner = re.escape(type(module).__name__)
    made_moved = re.compile(rf"(?<![\w.]){owner}\s*\(.*\)\s*\.\s*(?:to|cuda)\s*\(")
    bound = re.compile(rf"(?<![\w.])([A-Za-z_][\w.]*)\s*=\s*{owner}\s*\(")
    seen: set[str] = set()
    user: Optional[FrameType] = frame
    while user is not None:
        path = user.f_code.co_filename
        if path not in seen and frames.is_user_code(user.f_code):
            seen.add(path)
            text = naming.without_comments("".join(linecache.getlines(path)))
            if made_moved.search(text):
                return True
            for name in set(bound.findall(text)):
                if re.search(rf"(?<![\w.]){re.escape(name)}\s*\.\s*(?:to|cuda)\s*\(", text):
                    return True
        user = user.f_back
    return False


def _attribute_of(
    owner: torch.nn.Module, operand: Any, frame: FrameType, provenance: Any, bare: bool
) -> Optional[PlainAttribute]:
    """The plain attribute ``operand`` is, views or was computed from: the nearest (a
    diffusion schedule's ``self.sqrt_alphas_cumprod`` is computed from ``self.betas``, and read
    itself)."""
    local_values = {id(v) for v in frames.read_locals(frame).values()}
    code = frame.f_code
    candidates: list[tuple[Optional[int], str, Any, Optional[Prov]]] = []
    for name, value in vars(owner).items():
        if not isinstance(value, _Tensor) or not value.is_cpu or id(value) in local_values:
            continue
        prov = provenance.lookup(value) if provenance is not None else None
        if prov is not None and _made_in(prov, code):  # (bound by this very call)
            continue
        candidates.append((_distance(operand, value, provenance), name, value, prov))
    reached = [(d, name, value, prov) for d, name, value, prov in candidates if d is not None]
    if not reached:
        return None
    _, name, value, prov = min(reached, key=lambda c: c[0])
    made_at = prov.where() if prov is not None else None
    learned = value.is_floating_point() and (
        value.requires_grad
        or (
            bool(LEARNED_TENSOR_NAME.search(name))
            and prov is not None
            and prov.op in LEARNED_INITIAL_VALUES
        )
    )
    # (a 0-dim one rides along with device tensors; a learned one is fixed otherwise)
    others = tuple(
        f"self.{n}"
        for _, n, v, _ in candidates
        if n != name and v.dim() > 0 and not v.requires_grad and not LEARNED_TENSOR_NAME.search(n)
    )
    owner_name = type(owner).__name__
    return PlainAttribute(f"self.{name}", name, owner_name, made_at, bare, learned, others)


def _made_in(prov: Prov, code: CodeType) -> bool:
    """Whether ``prov`` was made by a line of the function ``code``."""
    if os.path.abspath(prov.path) != os.path.abspath(code.co_filename):
        return False
    lines = [line for _, line in dis.findlinestarts(code) if line is not None]
    return bool(lines) and min(lines) <= prov.line <= max(lines)


def _distance(operand: Any, attribute: Any, provenance: Any) -> Optional[int]:
    """0 when ``operand`` is ``attribute`` or shares its memory, else how many creation records
    back ``attribute``'s is among ``operand``'s ancestors; None when it is not."""
    if operand is attribute or _same_storage(operand, attribute):
        return 0
    if provenance is None:
        return None
    origin = provenance.lookup(attribute)
    record = provenance.lookup(operand)
    if origin is None or record is None:
        return None
    queue: list[tuple[Prov, int]] = [(record, 1)]
    for _ in range(_ANCESTORS):
        if not queue:
            return None
        prov, depth = queue.pop(0)
        if prov.made == origin.made:
            return depth
        queue.extend((parent, depth + 1) for parent in prov.parents)
    return None


def _same_storage(a: Any, b: Any) -> bool:
    try:
        pointer = a.untyped_storage().data_ptr()
        return bool(pointer) and pointer == b.untyped_storage().data_ptr()
    except Exception:  # sparse, nested, wrapper subclasses: no storage of their own
        return False


def explained(attribute: PlainAttribute) -> str:
    """The sentence that leads to the fix."""
    made = f" (made at {attribute.made_at})" if attribute.made_at else ""
    if attribute.learned:
        return (
            f"{attribute.name} is a plain tensor attribute of {attribute.owner}{made}: "
            f"model.to(device) moves parameters and buffers, not plain attributes, and "
            f"model.parameters() leaves it out, so the optimizer never trains it. Make it a "
            f"parameter in __init__: self.{attribute.attribute} = nn.Parameter(...)."
        )
    return (
        f"{attribute.name} is a plain tensor attribute of {attribute.owner}{made}: "
        f"model.to(device) moves parameters and buffers, not plain attributes. Register it in "
        f'__init__ with self.register_buffer("{attribute.attribute}", ..., persistent=False) '
        f"and it moves with the model (or wrap it in nn.Parameter(...) if it is to be learned)"
        + (
            f"; then move the {attribute.owner} too, as the model is: .to(device)."
            if attribute.bare
            else "."
        )
        + _others_text(attribute)
    )


def _others_text(attribute: PlainAttribute) -> str:
    """The module's other plain tensor attributes left on the CPU, to register alike."""
    others = attribute.others
    if not others:
        return ""
    shown = [*others[:4], f"{len(others) - 4} more"] if len(others) > 4 else list(others)
    listed = ", ".join(shown[:-1]) + " and " + shown[-1] if len(shown) > 1 else shown[0]
    these = "it" if len(others) == 1 else "them"
    return f" {attribute.owner} keeps {listed} the same way, on the CPU: register {these} alike."
