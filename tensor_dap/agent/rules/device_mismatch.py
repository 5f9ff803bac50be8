"""``device-mismatch``: an op receives tensors on more than one device.

Checked *before* the op runs, so the debugger stops while every operand is still inspectable
(PyTorch then raises its own "Expected all tensors to be on the same device" error, or — in the
classic CPU loss accumulator — builds a graph that fails later in backward). A 0-dim CPU tensor
without grad history is a number to PyTorch and never counts — unless an in-place op writes into
it: ``running_loss += loss.detach()`` into ``running_loss = torch.tensor(0.0)`` raises on a GPU
(a CPU scalar rides along as an input only, never as the output).
"""

from __future__ import annotations

import ast
import dis
import functools
import re
from typing import Any, NamedTuple, Optional

import torch

from tensor_dap import catalog
from tensor_dap.agent import frames, naming, plain_attributes
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.rules import Report
from tensor_dap.agent.rules._args import created, is_cpu_scalar, join_names, tensor_args
from tensor_dap.agent.rules.hooks import Args, Kwargs
from tensor_dap.device_fix import device_in_fix
from tensor_dap.torch_names import (
    CPU_UNLESS_TOLD,
    DTYPE_CONVERSIONS,
    HOST_ARGUMENTS,
    HOST_KEYWORDS,
    TENSOR_FACTORIES,
)

RULE = catalog.rule("device-mismatch")

_Tensor = torch.Tensor
#: what a CPU tensor was made by, when making it on the accelerator at once is the fix
_FACTORIES = TENSOR_FACTORIES | DTYPE_CONVERSIONS


#: indexing ops: mixing devices is allowed there in part (see :func:`_indexing`)
_INDEXING = frozenset(("__getitem__", "__setitem__", "index_put_", "index_put"))


def applies(op: OpInfo) -> bool:
    return op.name in _INDEXING or not (op.device_move or op.backward)


def before(op: OpInfo, args: Args, kwargs: Kwargs, caller: Any, state: Any) -> Any:
    if op.device_move:  # (the indexing ops: the only device moves it applies to)
        return _indexing(op.name, args, caller, state)
    host = HOST_ARGUMENTS.get(op.name)
    if host is not None:
        args, kwargs = _without_host_arguments(host, args, kwargs)
    # fast path: ``is_cpu`` is a plain flag (``.device`` builds an object); accelerator
    # tensors compare their device index. Only a mix goes to the slow path.
    on_cpu = False
    index = None
    for arg in args:
        if isinstance(arg, _Tensor):
            if arg.is_cpu:
                on_cpu = True
            elif index is None:
                index = arg.get_device()
            elif arg.get_device() != index:
                return _report(tensor_args(args, kwargs), caller, state, _target(op, args))
        elif arg.__class__ is list or arg.__class__ is tuple:
            # ``torch.cat(pieces)``: scan again, the tensors one level down in line with the
            # others (ops taking lists are few: the common path stays one flat loop)
            return before(op, tuple(tensor_args(args, None)), kwargs, caller, state)
    if kwargs:
        for arg in kwargs.values():
            if isinstance(arg, _Tensor):
                if arg.is_cpu:
                    on_cpu = True
                elif index is None:
                    index = arg.get_device()
    if on_cpu and index is not None:
        return _report(tensor_args(args, kwargs), caller, state, _target(op, args))
    return None


def _target(op: OpInfo, args: Args) -> Any:
    """The tensor an in-place op writes into (``self``), else None (and for the ops that read
    their device tensor as a number or a shape: ``cpu0.fill_(cuda0)`` is legal)."""
    return args[0] if op.inplace and args and op.name not in _VALUE_READ_AS_NUMBER else None


#: in-place ops that read a device tensor argument as a number (``.item()``) or for its shape
_VALUE_READ_AS_NUMBER = frozenset(("fill_", "masked_fill_", "index_fill_", "resize_as_"))


def _without_host_arguments(
    host: tuple[int, ...], args: Args, kwargs: Kwargs
) -> tuple[Args, Kwargs]:
    """``args`` and ``kwargs`` without the CPU arguments an op takes (:data:`HOST_ARGUMENTS`),
    which are integers: a GRU's second argument is its float ``hx`` unless the sequence is
    packed, and an ``hx`` left on the CPU is the mismatch this rule is for."""
    kept = tuple(
        None
        if position in host
        and isinstance(arg, _Tensor)
        and (not arg.is_floating_point() or arg.numel() == 0)  # (a jagged tensor's lengths)
        else arg
        for position, arg in enumerate(args)
    )
    if kwargs:
        kwargs = {k: v for k, v in kwargs.items() if k not in HOST_KEYWORDS}
    return kept, kwargs


def _indexing(name: str, args: Args, caller: Any = None, state: Any = None) -> Optional[Report]:
    """What PyTorch refuses of indexing across devices: a CPU tensor indexed by a device
    tensor (``table[labels]``: indices must be on the CPU or the indexed tensor's device), and a
    write through tensor indices (``t[idx] = v``, ``index_put_``) of values on another device
    (a 0-dim CPU value is a number). A device tensor indexed by CPU indices, and a write
    through ints and slices (a ``copy_`` into a view), are fine."""
    if len(args) < 2 or not isinstance(args[0], _Tensor):
        return None
    target, index = args[0], args[1]
    indices = index if index.__class__ is tuple or index.__class__ is list else (index,)
    index_tensors = [t for t in indices if isinstance(t, _Tensor)]
    if not index_tensors:
        return None
    if name == "__getitem__":
        if not target.is_cpu:
            return None
        elsewhere = [t for t in index_tensors if not t.is_cpu]
        return _report([target, *elsewhere], caller, state) if elsewhere else None
    value = args[2] if len(args) > 2 else None
    if isinstance(value, _Tensor) and not is_cpu_scalar(value):
        return _report([target, value], caller, state)
    return None


def _report(
    tensors: list[Any], caller: Any = None, state: Any = None, target: Any = None
) -> Optional[Report]:
    """The slow path: more than one device was seen; drop CPU scalars (not the ``target`` an
    in-place op writes into) and decide."""
    operands = [
        t for t in tensors if (t is target or not is_cpu_scalar(t)) and t.device.type != "meta"
    ]
    devices = {t.device for t in operands}
    if len(devices) < 2:
        return None
    plain = plain_attributes.held(operands, caller, state) if caller is not None else {}
    argument = _accelerator_argument(caller) if caller is not None else None
    # (the index of each operand in the message's list: described in the operands' order)
    attributes = {i: plain[id(t)] for i, t in enumerate(operands) if id(t) in plain}
    unmoved = _unmoved_modules(operands, caller) if caller is not None else {}
    bases = _view_bases(operands, state) if state is not None else {}
    handed = _cpu_argument(caller, operands, state) if caller is not None else None
    if not attributes and argument is None and not unmoved and not bases and handed is None:
        return Report(tensors=operands, message=_message)
    message = functools.partial(
        _message,
        attributes=attributes,
        argument=argument,
        unmoved=unmoved,
        bases=bases,
        handed=handed,
    )
    return Report(tensors=operands, message=message)


class _Handed(NamedTuple):
    """A CPU tensor a function of the program is handed beside one on the accelerator, and
    the caller's expression for it: ``labels`` of ``batch_hard_triplet_loss(labels, emb)``,
    handed ``y`` at ``train.py:53``."""

    parameter: str
    function: str
    other: str
    expression: str
    at: str


def _cpu_argument(caller: Any, operands: list[Any], state: Any) -> Optional[_Handed]:
    """The op's function (the user's frame of it) was handed one tensor on the CPU and others
    off it, by a call of the program's that names it (``loss = triplet_loss(y, emb)``): a
    batch's labels left behind when its inputs moved (``x = x.to(device)``), used inside to
    build masks whose mismatch comes lines later. None for anything else (a module's
    ``forward``, called as ``model(x)``; several CPU arguments; a call not found)."""
    user = frames.user_frame(caller)
    if user is None:
        return None
    code = user.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    values = frames.read_locals(user)
    tensors = {n: v for n in names if isinstance(v := values.get(n), _Tensor)}
    cpu = [n for n, t in tensors.items() if t.is_cpu and not is_cpu_scalar(t)]
    elsewhere = [n for n, t in tensors.items() if not t.is_cpu and t.device.type != "meta"]
    if len(cpu) != 1 or not elsewhere:
        return None
    if not any(_may_come_from(t, tensors[cpu[0]], state) for t in operands if t.is_cpu):
        return None
    outer = user.f_back
    while outer is not None and not frames.is_user_code(outer.f_code):
        outer = outer.f_back
    if outer is None:
        return None
    path, line = outer.f_code.co_filename, outer.f_lineno
    statement = naming.parsed_statement(naming.statement_text(path, line))
    calls = [
        node
        for node in (ast.walk(statement) if statement is not None else ())
        if isinstance(node, ast.Call) and _called_name(node.func) == code.co_name
    ]
    if len(calls) != 1:
        return None
    call = calls[0]
    positional = list(code.co_varnames[: code.co_argcount])
    positional = positional[1:] if positional[:1] == ["self"] else positional
    handed: dict[str, ast.expr] = {}
    for parameter, given in zip(positional, call.args):
        if isinstance(given, ast.Starred):  # (what follows lands elsewhere)
            break
        handed[parameter] = given
    handed.update({k.arg: k.value for k in call.keywords if k.arg is not None})
    expression = handed.get(cpu[0])
    if expression is None:
        return None
    return _Handed(
        cpu[0], code.co_name, elsewhere[0], ast.unparse(expression), naming.place(path, line)
    )


def _may_come_from(operand: Any, argument: Any, state: Any) -> bool:
    """Whether ``operand`` is ``argument`` or may be computed from it: its creation records
    reach the argument's, or end where they were cut short (a record kept past
    ``provenance.MAX_DEPTH`` without its parents), not at other tensors' roots. A tensor with
    gradient history (an unmoved parameter's rows, ``centers[labels]``) is no such result."""
    if operand is argument:
        return True
    if operand.requires_grad:
        return False
    provenance = getattr(state, "provenance", None)
    record = provenance.lookup(operand) if provenance is not None else None
    origin = provenance.lookup(argument) if provenance is not None else None
    if record is None or origin is None:
        return False
    queue = [record]
    for _ in range(_RECORDS_BACK * 2):
        if not queue:
            return False
        prov = queue.pop(0)
        if prov.made == origin.made or prov.shortened:
            return True
        queue.extend(prov.parents)
    return False


def _called_name(func: ast.expr) -> Optional[str]:
    """``f`` of ``f(...)`` and of ``obj.f(...)``."""
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def _view_bases(operands: list[Any], state: Any) -> dict[int, Any]:
    """Per CPU operand that is a view (``outputs[1:].view(-1, V)``), the creation record of the
    tensor it views, when one is known: a seq2seq forward's ``outputs = torch.zeros(...)``,
    written step by step with the decoder's outputs (in place: its record is still the
    factory's), is where the CPU comes from, not the ``view`` (by the index in ``operands``)."""
    found: dict[int, Any] = {}
    for i, tensor in enumerate(operands):
        base = tensor._base if tensor.is_cpu else None
        prov = state.provenance.lookup(base) if base is not None else None
        if prov is not None:
            found[i] = prov
    return found


#: frames looked through, from the op's, for the modules whose forward holds an operand
_MODULE_FRAMES = 16


def _unmoved_modules(operands: list[Any], caller: Any) -> dict[int, str]:
    """Per CPU operand that is a parameter or buffer of a module running its forward (a loss
    module's ``weight=`` class weights: ``nn.CrossEntropyLoss(weight=weights)`` never moved; a
    model never moved), the name the user's code gives the outermost such module
    (``criterion``, ``model``): by the index in ``operands``."""
    owners: list[torch.nn.Module] = []  # the modules whose forward is running, innermost first
    frame = caller
    for _ in range(_MODULE_FRAMES):
        if frame is None:
            break
        owner = frames.read_locals(frame).get("self")
        if isinstance(owner, torch.nn.Module) and all(owner is not o for o in owners):
            owners.append(owner)
        frame = frame.f_back
    found: dict[int, str] = {}
    for i, tensor in enumerate(operands):
        if tensor.device.type != "cpu":
            continue
        holders = [o for o in owners if any(t is tensor for t in _module_tensors(o))]
        # (a module part of which is on the device was moved: its layer made later, in
        # forward, is told otherwise)
        if not holders or any(t.device.type != "cpu" for o in holders for t in _module_tensors(o)):
            continue
        name = _module_name(holders[-1], caller)
        if name is not None:
            found[i] = name
    return found


def _module_tensors(module: torch.nn.Module) -> Any:
    yield from module.parameters()
    yield from module.buffers()


def _module_name(module: torch.nn.Module, caller: Any) -> Optional[str]:
    """What the user's code calls ``module`` (not ``self``, inside its own forward)."""
    frame = frames.user_frame(caller)
    while frame is not None:
        if frames.is_user_code(frame.f_code):
            name = naming.object_name(frame, module)
            if name is not None and name != "self":
                return name
        frame = frame.f_back
    return None


class _Argument(NamedTuple):
    """A method's argument holding a tensor off the CPU, and where the method's lines are."""

    name: str
    path: str
    first: int
    last: int

    def holds(self, prov: Any) -> bool:
        """Whether the tensor ``prov`` records was made in the method (where the argument is
        in scope)."""
        return prov is not None and prov.path == self.path and self.first <= prov.line <= self.last


def _accelerator_argument(caller: Any) -> Optional[_Argument]:
    """In a method (``forward(self, x)``), the first argument holding a tensor off the CPU: a
    module's code makes its tensors on ``x.device``, not on a device variable of the script
    that happens to be a global (the model then works wherever it is moved, and in other
    scripts). None outside a method, or when no argument is such a tensor."""
    user = frames.user_frame(caller)
    if user is None:
        return None
    code = user.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    if len(names) < 2 or names[0] != "self" or "device" in names:
        return None
    values = frames.read_locals(user)
    for name in names[1:]:
        value = values.get(name)
        if isinstance(value, _Tensor) and not value.is_cpu:
            lines = [line for _, line in dis.findlinestarts(code) if line is not None]
            last = max(lines, default=code.co_firstlineno)
            return _Argument(name, code.co_filename, code.co_firstlineno, last)
    return None


def _made_by_factory(prov: Any) -> bool:
    """Whether a Prov's op (a name, or source text when read statically) built the tensor: a
    dtype conversion (``torch.zeros(3).float()``) did when what it converted was a factory's
    (``torch.stack([...]).float()`` is computed from what was stacked)."""
    if prov is None:
        return False
    if prov.op in DTYPE_CONVERSIONS and prov.parents:
        return len(prov.parents) == 1 and _made_by_factory(prov.parents[0])
    match = re.match(r"`?(?:torch\.)?(\w+)\(", prov.op)
    return prov.op in _FACTORIES or bool(match and match.group(1) in _FACTORIES)


def _factory(prov: Any) -> Any:
    """The factory's record of a tensor :func:`_made_by_factory` (past its dtype conversions:
    ``torch.zeros(...)`` of ``torch.zeros(3).float()``), as the advice names it."""
    while prov.op in DTYPE_CONVERSIONS and len(prov.parents) == 1:
        prov = prov.parents[0]
    return prov


#: creation records looked at, walking back from a CPU operand to the factories it comes from
_RECORDS_BACK = 16


def _factory_roots(prov: Any) -> list[Any]:
    """The factory calls a CPU operand was computed from (``torch.ones`` of ``mask == 0`` after
    ``mask = torch.tril(torch.ones(T, T))``; ``torch.arange`` of ``torch.arange(T)[None, :] >=
    lengths[:, None]``), when every tensor it comes from is one of them: made there with
    ``device=``, all of it is (one input from elsewhere, a batch's data, and the advice would
    move the mismatch to the next line)."""
    if prov is None:
        return []
    roots: dict[Any, Any] = {}
    queue, seen = [prov], 0
    while queue:
        record = queue.pop(0)
        seen += 1
        if seen > _RECORDS_BACK:
            return []
        if record.untracked or record.cut:  # (an input no record says where it was made)
            return []
        if record.op in CPU_UNLESS_TOLD and record is not prov:
            roots[record.made] = record
        elif record.parents:
            queue.extend(record.parents)
        else:
            return []  # (made by anything else: the data, a number read back...)
    return list(roots.values())


def _message(
    described: list[Any],
    expression: str,
    attributes: Optional[dict[int, plain_attributes.PlainAttribute]] = None,
    argument: Optional[_Argument] = None,
    unmoved: Optional[dict[int, str]] = None,
    bases: Optional[dict[int, Any]] = None,
    handed: Optional[_Handed] = None,
) -> str:
    parts = [f"{d.name} is on {d.device}{created(d)}" for d in described]
    text = f"`{expression}`: " + ", ".join(parts) + "."
    attributes, unmoved = attributes or {}, unmoved or {}
    held = [attributes[i] for i, d in enumerate(described) if i in attributes]
    explained = {*attributes, *unmoved}
    cpu = [d for i, d in enumerate(described) if d.device == "cpu" and i not in explained]
    accel = [d for d in described if d.device != "cpu"]
    for attribute in {a.name: a for a in held}.values():
        text += " " + plain_attributes.explained(attribute)
    for module in dict.fromkeys(unmoved.values()):  # (its tensors move with it, as the model's)
        held_names = [described[i].name for i, m in unmoved.items() if m == module]
        names = join_names(held_names)
        verb = "belongs" if len(held_names) == 1 else "belong"
        path = next((d.prov.path for d in described if d.prov is not None), None)
        variable = naming.device_variable(path)
        to = device_in_fix(accel[0].device, variable=variable) if accel else ""
        text += f" {names} {verb} to {module}, which was not moved: call {module}.to({to})."
    if cpu and accel:
        where = next((d.prov.path for d in cpu if d.prov is not None), None)
        fresh = [d.name for d in cpu if _made_by_factory(d.prov)]
        roots_of = {d.name: _factory_roots(d.prov) if d.name not in fresh else [] for d in cpu}
        for i, d in enumerate(described):  # (a view of a factory's tensor: the factory)
            base = (bases or {}).get(i)
            if d in cpu and d.name not in fresh and not roots_of[d.name] and base is not None:
                roots_of[d.name] = (
                    [_factory(base)] if _made_by_factory(base) else _factory_roots(base)
                )
        made = [d.prov for d in cpu] + [r for roots in roots_of.values() for r in roots]
        if argument is not None and all(argument.holds(prov) for prov in made):
            # (all made in a method: the device its input is on)
            device = device_in_fix(accel[0].device, holder=argument.name)
        else:
            variable = naming.device_variable(where)
            device = device_in_fix(accel[0].device, variable=variable, holder=accel[0].name)
        moved = []
        for d in cpu:
            roots = roots_of[d.name]
            if roots:
                factories = " and ".join(f"torch.{r.op}(...) at {r.where()}" for r in roots)
                text += f" {d.name} is computed from {factories}: pass it device={device}."
            elif d.name not in fresh:
                moved.append(d.name)
        if fresh:
            text += f" Create {join_names(fresh)} with device={device}."
        if moved and handed is not None:  # (where it came from: the fix is there)
            there = device_in_fix(accel[0].device, variable=naming.device_variable(where))
            given = handed.expression
            text += (
                f" {handed.function}() is handed {handed.parameter} on cpu beside "
                f"{handed.other} on {accel[0].device}: `{given}` at {handed.at}. Hand it "
                f"`{given}.to({there})` there (or move `{given}` with the batch's other "
                "tensors)."
            )
        elif moved:
            text += f" Move {join_names(moved)} to that device with .to({device})."
    elif not held and not unmoved:
        text += " Move the tensors to one device with .to(...)."
    return text
