"""``leaves-device``: user code copies a tensor from an accelerator to the CPU at every
training step.

Watches ``.cpu()``, ``.to("cpu")`` / ``.to(cpu_tensor)``, ``.numpy()``, ``.tolist()``,
``np.asarray(t)`` and ``cpu_t.copy_(acc_t)`` called directly from user code (torch's own
printing and saving are not the user's doing). Reading one number (``.item()``, ``float(t)``...)
is what people do to log a loss, and so is copying a one-element tensor (``loss.cpu().numpy()``)
or one sample's output (an agent's action for its environment); they are reported only with
the option ``{"scalars": true}``.

A copy costs a device sync; the bug is paying it at every step. Copying once after a loop
(``torch.cat(preds).cpu().numpy()`` after evaluation, ``idx[0].tolist()`` after generation),
once per epoch, or per batch of an evaluation or rollout with no backward() in between is what
the fix looks like, so a line is reported when it copies again after at most
:data:`EVERY_STEP_BACKWARDS` backward() calls (a training step, a GAN's two or three, a few
accumulated micro-batches) and at least one: the copy runs inside the training loop. A line
that once copied twice with no backward() between is such a loop of batches (an evaluation
after a short epoch of three training steps, a rollout feeding actions to an environment): it
is never reported.
"""

from __future__ import annotations

import ast
from types import FrameType
from typing import Any, Optional

import torch

from tensor_dap import catalog
from tensor_dap.agent import frames, naming
from tensor_dap.agent.op_kinds import HOST_COPIES, SCALAR_READS, OpInfo
from tensor_dap.agent.rules import Report
from tensor_dap.agent.rules._args import created
from tensor_dap.agent.rules.hooks import Args, Kwargs
from tensor_dap.torch_names import HOST_ARGUMENTS_COPIED_FOR

RULE = catalog.rule("leaves-device")

_Tensor = torch.Tensor
_WATCHED = HOST_COPIES | SCALAR_READS | {"to", "copy_"}

#: a line copying again within this many backward() calls copies at every training step
EVERY_STEP_BACKWARDS = 3
_BACKWARDS = "leaves-device.backwards"
#: rule_state key: each copy's call site (:func:`_call_site`) -> backward() calls when it last
#: copied
_LAST_COPY = "leaves-device.last-copy"
#: the call sites that copied twice with no backward() between (loops that do not train)
_BATCH_LOOPS = "leaves-device.batch-loops"


def applies_before(op: OpInfo) -> bool:
    return op.name in _WATCHED or op.backward or op.name in HOST_ARGUMENTS_COPIED_FOR


#: rule_state key: the (file, line) of copies such an op was handed
_HOST_COPY_SITES = "leaves-device.host-copy-sites"
#: rule_state key: the (file, line) of each recent copy from an accelerator to the host ->
#: its numbers sorted (the latest _COPIES_KEPT lines; copies of up to _NUMBERS_KEPT numbers)
_LAST_COPIES = "leaves-device.last-copies"
_COPIES_KEPT = 8
_NUMBERS_KEPT = 4096
_INTO_NUMBERS = frozenset(["tolist", "numpy", "cpu"])
#: ops followed back from a host argument to the copy that made it (``lengths.cpu()`` sorted
#: by ``pack_padded_sequence``, ``.long()`` after the copy)
_HOPS_TO_COPY = 4


def _on_accelerator(tensor: Any) -> bool:
    return isinstance(tensor, _Tensor) and tensor.device.type not in ("cpu", "meta")


def _target_is_cpu(args: Args, kwargs: Kwargs) -> bool:
    """Whether ``Tensor.to(...)`` arguments name the CPU as destination."""
    candidates = list(args[1:])
    if kwargs and "device" in kwargs:
        candidates.append(kwargs["device"])
    for arg in candidates:
        if isinstance(arg, _Tensor):
            return arg.device.type == "cpu"
        if isinstance(arg, (str, torch.device)):
            try:
                return torch.device(arg).type == "cpu"
            except (RuntimeError, TypeError):
                return False
    return False


def before(op: OpInfo, args: Args, kwargs: Kwargs, caller: Any, state: Any) -> Any:
    if op.backward:
        state.rule_state[_BACKWARDS] = state.rule_state.get(_BACKWARDS, 0) + 1
        return None
    host = HOST_ARGUMENTS_COPIED_FOR.get(op.name)
    if host is not None:
        _note_host_copies(host, args, state)
        return None
    if not args or not frames.is_user_code(caller.f_code):
        return None
    name = op.name
    if name == "copy_":
        into_cpu = len(args) > 1 and isinstance(args[0], _Tensor) and args[0].device.type == "cpu"
        if not into_cpu or not _on_accelerator(args[1]):
            return None
        source = args[1]
        if (_few_numbers(source) and not _scalars(state)) or not _every_step(caller, state):
            return None
        return Report(tensors=[source, args[0]], message=_copy_message)
    source = args[0]
    if not _on_accelerator(source):
        return None
    if name == "to" and not _target_is_cpu(args, kwargs):
        return None
    if (name in SCALAR_READS or _few_numbers(source)) and not _scalars(state):
        return None
    if not _every_step(caller, state):
        return None
    sites = state.rule_state.get(_HOST_COPY_SITES)
    if sites and (caller.f_code.co_filename, caller.f_lineno) in sites:
        return None  # (the copy PyTorch asks for: handed to pack_padded_sequence, ctc_loss)
    return Report(tensors=[source], message=_message(name, _host_original(source, caller, state)))


#: ops copying a host tensor to the device, as a line calls them
_TO_DEVICE = frozenset({"to", "cuda"})


def _host_original(source: Any, caller: FrameType, state: Any) -> Optional[tuple[str, str]]:
    """``("yb", "y[i:i + 32]")`` when ``source`` is the device copy the calling function made of
    a CPU tensor it still holds (``xb, yb = X[i:i + 32].to(device), y[i:i + 32].to(device)``):
    labels collected for a metric are then read from the original, with no copy back."""
    prov = state.provenance.lookup(source)
    if prov is None or prov.op not in _TO_DEVICE or prov.path != caller.f_code.co_filename:
        return None
    statement = naming.parsed_statement(naming.statement_text(prov.path, prov.line))
    if not isinstance(statement, ast.Assign):
        return None
    pairs: list[tuple[ast.expr, ast.expr]] = []
    for target in statement.targets:
        values = statement.value
        if isinstance(target, ast.Tuple) and isinstance(values, ast.Tuple):
            if len(target.elts) == len(values.elts):
                pairs.extend(zip(target.elts, values.elts))
        else:
            pairs.append((target, values))
    local = frames.read_locals(caller)  # (not f_locals: its copy would keep the batch alive)

    def bound(name: str) -> Any:
        return local[name] if name in local else caller.f_globals.get(name)

    for target, value in pairs:
        if not isinstance(target, ast.Name) or bound(target.id) is not source:
            continue
        if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Attribute):
            return None
        if value.func.attr not in _TO_DEVICE:
            return None
        root = value.func.value
        while isinstance(root, (ast.Subscript, ast.Attribute)):
            root = root.value
        held = bound(root.id) if isinstance(root, ast.Name) else None
        if isinstance(held, _Tensor) and held.device.type == "cpu":
            return target.id, ast.unparse(value.func.value)
        return None
    return None


#: a copy of one sample (a batch of one) of at most this many numbers reads a few numbers
ONE_SAMPLE_NUMBERS = 1024


def _few_numbers(source: Any) -> bool:
    """Whether copying ``source`` reads a few numbers, as ``.item()`` does: one number, or
    one sample's output (``actor(state).cpu().numpy()`` of a ``(1, action_dim)`` action for
    the environment's next step in TD3, SAC, DDPG: one update per environment step, and the
    environment needs the action on the host: the copy cannot move after the loop)."""
    count: int = source.numel()
    if source.is_nested or source.layout != torch.strided:  # (no sizes to read)
        return count == 1
    return count == 1 or bool(
        source.dim() >= 2 and source.shape[0] == 1 and count <= ONE_SAMPLE_NUMBERS
    )


def _note_host_copies(positions: tuple[int, ...], args: Args, state: Any) -> None:
    """An op that takes ``args[positions]`` on the CPU: the line of the copy each was made by
    (followed back through the ops after it, ``.long()``, a sort) is no needless copy, however
    the op was reached (an alias, a helper, a module's ``forward``, ``nn.CTCLoss``). Lengths
    that went through Python (``lengths.tolist()``, ``.cpu().numpy()``: the tensor the op gets
    is made anew from them, with no link back) are taken for a recent copy of the same numbers
    from the device."""
    provenance = state.provenance
    for position in positions:
        arg = args[position] if len(args) > position else None
        prov = provenance.lookup(arg) if isinstance(arg, _Tensor) else None
        sites: list[Optional[tuple[str, int]]] = []
        copy = None
        for _ in range(_HOPS_TO_COPY):
            if prov is None:
                break
            if prov.op in HOST_COPIES:
                copy = (prov.path, prov.line)
                break
            if prov.op == "to":  # `.to("cpu")`, or a `.to(torch.int64)` on the way (whose line
                sites.append((prov.path, prov.line))  # copies nothing): noted, walked on
            prov = prov.parents[0] if prov.parents else None
        sites.append(copy or _copied_numbers(arg, state))
        state.rule_state.setdefault(_HOST_COPY_SITES, set()).update(s for s in sites if s)


def _copied_numbers(arg: Any, state: Any) -> Optional[tuple[str, int]]:
    """The line of a recent ``.tolist()``/``.numpy()``/``.cpu()`` copy of the numbers ``arg``
    holds (in any order: ``pack_padded_sequence`` sorts them), among those kept."""
    copies = state.rule_state.get(_LAST_COPIES)
    if not copies or not isinstance(arg, (_Tensor, list, tuple)):
        return None
    numel = arg.numel() if isinstance(arg, _Tensor) else len(arg)
    if isinstance(arg, _Tensor) and (arg.device.type != "cpu" or arg.layout != torch.strided):
        return None
    numbers = None
    for site, copied in reversed(copies.items()):
        if len(copied) != numel:
            continue
        try:
            if numbers is None:
                numbers = sorted(arg.tolist() if isinstance(arg, _Tensor) else arg)
            if numbers == copied:
                return site  # type: ignore[no-any-return]
        except Exception:  # (numbers of kinds that do not order)
            return None
    return None


def applies(op: OpInfo) -> bool:
    """``after``: copies to the host, remembered for :func:`_copied_numbers`."""
    return op.name in _INTO_NUMBERS


def after(op: OpInfo, args: Args, kwargs: Kwargs, out: Any, caller: Any, state: Any) -> None:
    """A small 1-d integer ``.tolist()``/``.numpy()``/``.cpu()`` of an accelerator tensor by the
    user (``.cpu().numpy()`` goes through Python too): its numbers (sorted) kept under its
    line, the latest :data:`_COPIES_KEPT` lines."""
    if not args or not _on_accelerator(args[0]) or not frames.is_user_code(caller.f_code):
        return
    source = args[0]
    # (lengths are integers in one dimension: not a float copy, a sparse or a nested tensor)
    if source.layout != torch.strided or source.dim() != 1 or source.is_floating_point():
        return
    if not 1 < source.numel() <= _NUMBERS_KEPT:
        return
    try:
        numbers = sorted(out if isinstance(out, list) else out.tolist())
    except Exception:
        return
    copies = state.rule_state.get(_LAST_COPIES)
    if copies is None:
        copies = state.rule_state[_LAST_COPIES] = {}
    site = (caller.f_code.co_filename, caller.f_lineno)
    copies.pop(site, None)
    copies[site] = numbers
    if len(copies) > _COPIES_KEPT:
        del copies[next(iter(copies))]


def _scalars(state: Any) -> bool:
    """Whether one-number reads are reported too (option ``{"scalars": true}``)."""
    return bool(state.options.get(RULE.id, {}).get("scalars"))


def _every_step(caller: Any, state: Any) -> bool:
    """Whether the copy at ``caller``'s line runs at every training step: the line copied
    before, and between then and now came at least one backward() and at most
    :data:`EVERY_STEP_BACKWARDS`. Each copy is remembered as the line's last."""
    backwards: int = state.rule_state.get(_BACKWARDS, 0)
    last: Optional[dict[tuple[int, ...], int]] = state.rule_state.get(_LAST_COPY)
    if last is None:
        last = state.rule_state[_LAST_COPY] = {}
    site = _call_site(caller)
    before = last.get(site)
    last[site] = backwards
    if before == backwards:  # (twice with no backward() between: an evaluation's or a
        # rollout's loop, whose copy per batch is the fix; its next epoch is no training step)
        state.rule_state.setdefault(_BATCH_LOOPS, set()).add(site)
    if site in state.rule_state.get(_BATCH_LOOPS, ()):
        return False
    return before is not None and 0 < backwards - before <= EVERY_STEP_BACKWARDS


def _call_site(caller: Any) -> tuple[int, ...]:
    """The copy's call expression, and the call of the function it is in: two copies on one
    line (``np.abs(h.cpu().numpy()).mean() / np.abs(w.cpu().numpy()).mean()``) or one helper
    copying for two of a step's lines are as many sites, not one line copying twice with no
    backward() between (which would make it a loop of batches, never reported)."""
    outer = caller.f_back
    here = (id(caller.f_code), caller.f_lasti)
    return here + ((id(outer.f_code), outer.f_lasti) if outer is not None else ())


def _message(op_name: str, original: Optional[tuple[str, str]] = None) -> Any:
    """``original``: (name, expression) of the CPU tensor the program copied this one from in
    the same function (:func:`_host_original`)."""
    call = {"to": "to('cpu')", "__array__": "numpy conversion"}.get(op_name, f"{op_name}()")

    def build(described: list[Any], expression: str) -> str:
        d = described[0]
        shape = d.shape_text
        head = (
            f"`{expression}`: {d.name} {shape} {d.dtype} leaves {d.device} for the CPU "
            f"({call}){created(d)}. This copies device memory to the host and waits for the "
            f"device at every training step; "
        )
        if original is not None:
            name, source = original
            return (
                f"{head}{name} is a copy of `{source}`, which is on the CPU: use `{source}` "
                f"there in place of copying {name} back."
            )
        return (
            f"{head}keep it on {d.device} (or collect on the device) and copy once after the loop."
        )

    return build


def _copy_message(described: list[Any], expression: str) -> str:
    src, dst = described
    return (
        f"`{expression}`: copy_ moves {src.name} {src.shape_text} from {src.device} into "
        f"{dst.name} on the CPU{created(src)} at every training step; copy once after the loop."
    )
