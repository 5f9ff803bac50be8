"""``losses.append(loss)``: the losses ``backward()`` ran from, kept by a list for logging.

Appending to a list is no torch op, so ``graph-kept`` looks at what it leaves behind: at each
``backward()`` it remembers the root (a one-element tensor with a ``grad_fn``, weakly, in a
:class:`~tensor_dap.agent.tensor_map.TensorMap`), and when a root is still alive
:data:`KEPT_AFTER` backward calls later, it looks for a list that holds it among the local
variables of the user's frames (and the attributes of their ``self``). A loop that rebinds
``loss`` each iteration lets the previous one go; a list keeps every iteration's loss and, with
it, every iteration's graph (their saved tensors were freed by ``backward()``, the nodes stay).
The finding is reported at the line that appends to that list (the source of the frame holding
it is searched for ``name.append(``) once that list, found again, keeps growing
(:func:`_grew`: a list made anew for each batch's few ``backward()`` calls, a deep ensemble's
members' losses, holds as many however long the program runs); a root no list holds, or whose
``append`` cannot be found, is let go unreported.

Other tensors of a graph a ``backward()`` went through, appended after it (a prioritized
replay's ``priorities.append(td_error)``, ``preds.append(pred)`` for an epoch's metric), keep
their graph's nodes the same way: a sampled op's result still alive at its line's next run,
after a ``backward()`` freed its graph, is looked for in the lists (and deques) the step's next
lines append to (:func:`_kept_after_backward`), and reported at that ``append`` once the list
keeps growing.

Losses or outputs appended and never backpropagated (an evaluation loop without
``torch.no_grad()``, a rollout's log-probabilities) keep more: every iteration's saved
activations. :func:`observe` sees a sample of ops (the engine's: the first 8 of each call site,
then one in 64): a result with a ``grad_fn`` is a candidate of its user line and op; when a
candidate is still alive at the line's next one and no ``backward()`` has run since it was made, the
``append`` keeping it is looked for in the source (on its line, or the next lines appending a
name it assigns, in its frame or the frames it is handed back to), and its graph is watched
(:mod:`tensor_dap.agent.graph_life`, on the tensor's node and the nodes it was computed from: a
REINFORCE episode's log-probabilities are summed and backpropagated at its end, a helper's
``torch.stack(losses).mean()`` is backpropagated by its caller, a winner-takes-all loss goes
through the shared body of the heads it did not pick). Freed before any backward went through
it, it is reported then, at the appending line, paused where the program let it go; still
alive when the program ends, then (:func:`finish_unused`). Outputs only when their modules were
in eval mode or several other graphs' ``backward()`` ran meanwhile (:func:`_kept_for_nothing`).
"""

from __future__ import annotations

import ast
import collections
import dis
import functools
import gc
import inspect
import linecache
import os
import re
import sys
import threading
import types
import weakref
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any, Callable, Iterator, NamedTuple, Optional, Sequence, Union

import torch

from tensor_dap.agent import frames, kept_updates, naming
from tensor_dap.agent.eval_modules import in_eval_mode, named_modules
from tensor_dap.agent.graph_life import GraphLife
from tensor_dap.agent.graph_nodes import accumulates_grad, freed_by_backward, graph_node
from tensor_dap.agent.graph_walk import footprint
from tensor_dap.agent.rules import Report
from tensor_dap.agent.tensor_map import TensorMap
from tensor_dap.tensor_text import size_text

Held = Union[list[Any], "collections.deque[Any]"]


def _growing(value: Any) -> bool:
    """Whether ``value`` is a list, or a deque without ``maxlen`` (a replay buffer's, a log's):
    what keeps one more tensor each step. A bounded deque (``deque(maxlen=100)``, a window of
    the last losses) keeps at most that many, however long the program runs."""
    return isinstance(value, list) or (
        isinstance(value, collections.deque) and value.maxlen is None
    )


#: a root alive this many backward() calls after its own is reported
KEPT_AFTER = 3
_ROOTS = "graph-kept.roots"
#: rule_state key: (file, line, list name) of a list found keeping a root -> (its id(), its
#: length then, the longest an earlier list there was found): see :func:`_grew`
_HOLDERS = "graph-kept.holders"
#: roots a list keeps before it is reported while no list at its line has been made anew
_LONG = 4
#: rule_state key: backward() calls so far (counted by ``graph-kept``)
BACKWARDS = "graph-kept.backwards"
_Tensor = torch.Tensor
_FRAMES = 6
#: list items looked at, from the end (a root appended per iteration is near it)
_TAIL = 64


def check(args: Any, caller: FrameType, state: Any, backwards: int) -> Optional[Report]:
    """At the ``backwards``-th backward() call: remember its root, report a kept one."""
    roots: TensorMap[int] = state.rule_state.get(_ROOTS)
    if roots is None:
        roots = state.rule_state[_ROOTS] = TensorMap(capacity=16)
    found = None
    kept = None
    for root, number in roots.items():
        if backwards - number >= KEPT_AFTER:
            roots.pop(root)
            if found is None:
                found = _holder(root, caller)
                kept = root
    root = args[0] if args else None
    if isinstance(root, _Tensor) and graph_node(root) is not None and root.numel() == 1:
        roots.set(root, backwards)
        scaled: Optional[TensorMap[Any]] = state.rule_state.get(_SCALED)
        ref = scaled.get(root) if scaled else None
        source = ref() if ref is not None else None
        if source is not None:  # (`(loss / accumulation_steps).backward()`: the loss itself)
            roots.set(source, backwards)
    if found is None:
        return None
    user, held, (path, line, name) = found
    if not _grew(state, (path, line, name), held):
        return None
    return Report(
        tensors=[kept],
        message=_message(kept, name, held),
        frame=user,
        at=(path, line),
        operands=False,
    )


def _grew(state: Any, key: tuple[str, int, str], held: Held) -> bool:
    """Whether the list found keeping a root keeps growing across training steps: found before
    at this line, the same list, longer, and an optimizer stepped twice since it was first
    found (without optimizers, longer than :data:`_LONG` and than any list made anew there).
    A list that keeps every iteration's loss grows over the steps; one made anew each batch
    for the losses of its backward() calls (a deep ensemble's members, each stepping its own
    optimizer once; PCGrad's tasks) holds one step's, however long the program runs."""
    holders: dict[tuple[str, int, str], tuple[int, int, int, dict[int, int]]]
    holders = state.rule_state.setdefault(_HOLDERS, {})
    steps: dict[int, int] = state.rule_state.get(kept_updates.STEPS_BY_OPTIMIZER, {})
    before = holders.get(key)
    # (a list at a freed list's address is a new one when it is shorter)
    if before is None or before[0] != id(held) or len(held) < before[1]:
        longest = max(before[1], before[2]) if before is not None else 0
        holders[key] = (id(held), len(held), longest, dict(steps))
        return False
    _, length, longest, then = before
    holders[key] = (id(held), len(held), longest, then)
    if len(held) == length:
        return False
    if steps:
        return any(count - then.get(optimizer, 0) >= 2 for optimizer, count in steps.items())
    return len(held) > max(longest, _LONG)


def _holds(held: Held, tensor: Any, tail: int) -> bool:
    """Whether one of the last ``tail`` items of ``held`` is ``tensor``, or a dict or tuple
    holding it (``outputs.append({"val_loss": loss, "val_mae": mae})``, ``history.append((epoch,
    loss))``)."""
    return any(value is tensor for item in _tail(held, tail) for value in _item_values(item))


def _tail(held: Any, count: int) -> list[Any]:
    """The last ``count`` items of a list or a deque (which has no slices; copied in one C
    call: a Python loop over it would fail if another thread appended meanwhile)."""
    return held[-count:] if isinstance(held, list) else list(held)[-count:]


def _item_values(item: Any) -> Any:
    """What a list's item holds: the values of a dict, the items of a tuple, else itself."""
    kind = type(item)
    return item.values() if kind is dict else item if kind is tuple else (item,)


def _holder(root: Any, caller: FrameType) -> Optional[tuple[FrameType, Held, tuple[str, int, str]]]:
    """The user frame, the list, and the ``(path, line)`` appending to it with the list's name
    there."""
    frame: Optional[FrameType] = frames.user_frame(caller)
    for _ in range(_FRAMES):
        if frame is None:
            return None
        if frames.is_user_code(frame.f_code):
            for name, held in _lists(frame):
                if _holds(held, root, _TAIL):
                    site = _append_site(frame, name, _names_of(frame, _tail(held, 4)))
                    return (frame, held, site) if site else None
        frame = frame.f_back
    return None


class _Scope(NamedTuple):
    """A function's source and what its names of the program's functions and lists mean: its
    ``self`` (None if it has none) and its module's globals. A frame's, or that of a function
    it calls (whose frame is gone by the time a kept root is found)."""

    code: CodeType
    owner: Any
    globals: dict[str, Any]


def _scope(frame: FrameType) -> _Scope:
    return _Scope(frame.f_code, frames.read_locals(frame).get("self"), frame.f_globals)


def _append_site(
    frame: FrameType, name: str, tensor_names: Sequence[str]
) -> Optional[tuple[str, int, str]]:
    """Where ``name`` is appended to, and the list's name there: on the frame's lines (see
    :func:`_append_line`), else on those of a function of the program's the frame calls (a
    trainer's ``fit`` calls ``module.training_step(batch)``, whose ``self.log("train/loss",
    loss)`` appends to ``self.logged``), else on any frame's line handing the list to a call
    (a function appending what it is handed, ``tracker.update(loss)``, is reported at the
    frame's call)."""
    scope = _scope(frame)
    #: the method of the list's owner appending what it is handed (`model.log(loss)`, not
    #: `model.lin(x)`), when one is found
    handing = r"\w+"
    # (the helpers the frame and the functions it calls use: those appending first, then
    # those calling one, `self.log_dict(...)` calling `self.log`)
    for depth in (0, _HELPER_DEPTH):
        line = _append_line(scope, name, tensor_names, depth=depth)
        if line:
            return scope.code.co_filename, line, name
        for callee, named in _callees(frame, name):
            line = _append_line(callee, named, tensor_names, depth=depth)
            if line and _appends_an_argument(callee.code, line):  # tracker.update(loss)
                handing = callee.code.co_name
                break  # (the call handing it the tensor: the frame's, found below)
            if line:
                return callee.code.co_filename, line, named
    owner = frames.read_locals(frame).get(name.split("[", 1)[0].split(".", 1)[0])
    library_owner = isinstance(owner, (torch.nn.Module, torch.optim.Optimizer))
    line = _append_line(
        scope, name, tensor_names, handed=True, library_owner=library_owner, method=handing
    )
    return (scope.code.co_filename, line, name) if line else None


#: a call on a line: ``name(`` or ``owner.name(``
_CALL = re.compile(r"(?<![\w.])(?<!def )(?:([A-Za-z_]\w*)\s*\.\s*)?([A-Za-z_]\w*)\s*\(")


def _callees(frame: FrameType, name: str) -> Iterator[tuple[_Scope, str]]:
    """The program's functions the frame's lines call, in line order, each with the name its
    own source gives the list ``name`` (``self.logged['loss']`` in a method of the object the
    frame calls ``module``, a local or a global of it; a module list's own name in a function
    of the same module). A list the frame holds under a local name is named otherwise there:
    such calls are left."""
    code = frame.f_code
    local = frames.read_locals(frame)
    root = name.split("[", 1)[0].split(".", 1)[0]
    as_global = root in frame.f_globals and local.get(root, _NONE) in (_NONE, frame.f_globals[root])
    seen = {code}
    for line in _code_lines(code):
        for owner_name, attribute in _CALL.findall(linecache.getline(code.co_filename, line)):
            if owner_name:
                owner = local.get(owner_name, frame.f_globals.get(owner_name))
                function = _method_of(owner, attribute) if owner is not None else None
            else:
                owner, function = None, _function_of(frame.f_globals.get(attribute))
            if function is None or function.__code__ in seen:
                continue
            seen.add(function.__code__)
            if not frames.is_user_code(function.__code__):
                continue
            if owner_name and root == owner_name:  # module.logged is self.logged in its method
                named = "self" + name[len(root) :]
                yield _Scope(function.__code__, owner, function.__globals__), named
            elif as_global and function.__globals__ is frame.f_globals:
                yield _Scope(function.__code__, owner, function.__globals__), name


_NONE = object()


def _code_lines(code: CodeType) -> list[int]:
    """The source lines a function's code starts statements on, in order."""
    return sorted({line for _, line in dis.findlinestarts(code) if line is not None})


def _source_texts(code: CodeType) -> list[str]:
    """The source lines of a function, from its ``def`` to its last statement."""
    first = code.co_firstlineno
    last = max((n for _, n in dis.findlinestarts(code) if n is not None), default=first)
    return [linecache.getline(code.co_filename, n) for n in range(first, last + 1)]


def _appends_an_argument(code: CodeType, line: int) -> bool:
    """Whether ``line`` of the function names one of its parameters but ``self`` (what it
    appends was handed to it)."""
    parameters = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    text = linecache.getline(code.co_filename, line)
    return any(re.search(rf"(?<![\w.]){p}(?!\w)", text) for p in parameters if p != "self")


def _method_of(owner: Any, attribute: str) -> Optional[types.FunctionType]:
    """The plain function ``owner.attribute`` calls, found on its class without running any
    code of the program's (a property, a ``__getattr__``)."""
    for kind in type(owner).__mro__:
        if attribute in vars(kind):
            return _function_of(vars(kind)[attribute])
    return None


def _lists(frame: FrameType) -> list[tuple[str, Held]]:
    found: list[tuple[str, Held]] = []
    try:
        local = frames.read_locals(frame)
    except Exception:
        return found
    # (and the module's lists the function names: a global history a loop appends to)
    named = {n: frame.f_globals[n] for n in frame.f_code.co_names if n in frame.f_globals}
    for name, value in {**named, **local}.items():
        if _growing(value):
            found.append((name, value))
        elif isinstance(value, dict) and (name in local or len(value) <= _TRACKER_KEYS):
            found.extend(_keyed_lists(name, value))
    owner = local.get("self")
    try:
        attrs = vars(owner) if owner is not None else {}
    except TypeError:
        attrs = {}
    for k, v in attrs.items():  # self.history, self.logged["loss"]
        if _growing(v):
            found.append((f"self.{k}", v))
        elif isinstance(v, dict) and len(v) <= _TRACKER_KEYS:
            found.extend(_keyed_lists(f"self.{k}", v))
    # a tracker's list: tracker.update(loss) appends to it; a module's a global names
    # (`model.training_step(x)` in a `fit()` of the script, appending to `self.losses`)
    objects = {**{n: v for n, v in named.items() if isinstance(v, torch.nn.Module)}, **local}
    for name, value in objects.items():
        try:
            if name == "self" or not (_plain_object(value) or isinstance(value, torch.nn.Module)):
                continue
            for k, v in vars(value).items():
                if _growing(v):
                    found.append((f"{name}.{k}", v))
                elif isinstance(v, dict) and len(v) <= _TRACKER_KEYS:  # its _data["loss"]
                    found.extend(_keyed_lists(f"{name}.{k}", v))
        except Exception:  # a proxy object whose attributes run code that raises
            continue
    return found


def _keyed_lists(name: str, held: dict[Any, Any]) -> list[tuple[str, Held]]:
    """``(name['loss'], the list)`` of each list a dict holds under a str or int key (other
    keys would run the program's code to be written: a module's ``repr``)."""
    return [
        (f"{name}[{key!r}]", item)
        for key, item in dict.items(held)
        if type(key) in (str, int) and _growing(item)
    ]


#: keys of a tracker's dict looked at (a vocabulary or a cache is not a tracker)
_TRACKER_KEYS = 64


def _plain_object(value: Any) -> bool:
    """An instance of a class of the program's (a metric tracker), whose attributes are read
    without running any code of it."""
    kind = type(value)
    return (
        hasattr(value, "__dict__")
        and not isinstance(value, (type, types.ModuleType, types.FunctionType, torch.nn.Module))
        and not kind.__module__.startswith(("torch", "builtins", "numpy"))
    )


def _names_of(frame: FrameType, items: list[Any]) -> list[str]:
    """The frame's local names bound to the tensors of a list's last ``items`` (``loss``, the
    name the latest iteration's appended tensor still has)."""
    kept = {id(value) for item in items for value in _item_values(item)}
    try:
        local = frames.read_locals(frame)
    except Exception:
        return []
    return [
        name for name, value in local.items() if isinstance(value, _Tensor) and id(value) in kept
    ]


def _append_line(
    scope: _Scope,
    name: str,
    tensor_names: Sequence[str] = (),
    handed: bool = False,
    depth: int = 0,
    library_owner: bool = False,
    method: str = r"\w+",
) -> int:
    """The first line of the scope's function appending to ``name``, else the first calling
    a function or a method of ``self`` of the program's that appends to it
    (``self.log("loss", loss)``, ``log("loss", loss)``; with ``depth``, through helpers
    calling such a function: :func:`_appending_helpers`); with ``handed``, the first handing it
    to a call (``record(losses, loss)``) or calling a method of its owner with arguments
    (``tracker.update(loss)`` for ``tracker.values``; ``method``: a pattern of its name), first
    among those naming the list's key or the tensor kept; 0 when none is found."""
    code = scope.code
    # (a dict's list is named hist['loss']: the source may write hist["loss"])
    spelled = re.escape(name).replace("'", "[\"']")
    item = re.fullmatch(r"(.+)\[('[^']*')\]", name)
    if item:  # or hist.setdefault("loss", []); in a helper, hist[key]
        quoted = re.escape(item.group(2)).replace("'", "[\"']")
        owner_dict = re.escape(item.group(1))
        default = (
            rf"{owner_dict}\s*\.\s*setdefault\(\s*(?:{quoted}|[A-Za-z_]\w*)\s*,"
            r"(?:[^()]|\([^()]*\))*\)"
        )
        spelled = rf"(?:{spelled}|{default})"
        keyed = rf"(?:{spelled}|{owner_dict}\[\s*[A-Za-z_]\w*\s*\])"
    else:
        keyed = spelled
    appends = re.compile(r"(?<![\w.])" + keyed + r"\s*(\.\s*(append|extend)\s*\(|\+=)")
    owner = name.split("[", 1)[0].rpartition(".")[0]
    if owner and owner != "self":  # a method of the owner called with arguments
        hands = re.compile(
            rf"(?<![\w.]){re.escape(owner)}\s*\.\s*(?P<method>{method})\s*\("
            r"(?P<args>\s*[^)\s](?:[^()#]|\([^()]*\))*)"
        )
    else:
        hands = re.compile(
            rf"(?<![\w.])(?P<callee>[A-Za-z_][\w.]*)\s*\((?:[^()#]|\([^()]*\))*"
            rf"(?<![\w.]){spelled}(?!\w)"
        )
    key = re.search(r"\['([^']*)'\]$", name)  # tracker._data['loss']: the line naming "loss"
    lines = _code_lines(code)
    texts = [(line, linecache.getline(code.co_filename, line)) for line in lines]
    # (of several calls, the one naming the list's key, else the tensor kept: `self.log("lr",
    # lr)` and `self.log("train_loss", loss)` both append to self.history)
    words = ([key.group(1)] if key else []) + [n for n in tensor_names if n.isidentifier()]
    tries: list[tuple[re.Pattern[str], str]] = []
    if handed:
        tries += [(hands, word) for word in (*words, "")]
    else:
        tries += [(appends, "")]
        helpers = _appending_helpers(scope, appends, depth)
        if helpers:  # self.log("loss", loss), whose method appends to self.logged[name]
            called = re.compile(rf"(?<![\w.])(?<!def )(?:{'|'.join(helpers)})\s*\(\s*[^)\s]")
            tries += [(called, word) for word in (*words, "")]
    for pattern, word in tries:
        named = re.compile(rf"(?<![\w.]){re.escape(word)}(?!\w)")
        for line, text in texts:
            for found in pattern.finditer(text):
                # (an owner's method is handed the tensor: `tracker.update(loss)`, not `loss =
                # module.training_step(batch)`)
                if word and not named.search(found.groupdict().get("args") or text):
                    continue
                if _writes(found, library_owner):
                    return line
    return 0


#: calls that read a list handed to them, never keep it: ``torch.stack(losses)``, ``len(...)``
_READERS = frozenset(
    ("len", "print", "sum", "max", "min", "sorted", "list", "tuple", "float", "int", "str")
    + ("repr", "format", "enumerate", "zip", "any", "all", "iter", "next", "reversed", "round")
    + ("abs", "isinstance", "dict", "set", "range", "map", "filter")
)
_READER_MODULES = frozenset(("torch", "np", "numpy", "math", "statistics", "F", "json"))


#: methods of torch's that a list's owner, a module keeping ``self._logged``, is called with,
#: which never take the tensor: ``model.to(device)``, ``model.train(True)``
_LIBRARY_METHODS = frozenset(
    name for kind in (torch.nn.Module, torch.optim.Optimizer) for name in vars(kind)
)


def _writes(found: re.Match[str], library_owner: bool = False) -> bool:
    """Whether a match may be the line keeping the list: not a call that only reads it, nor
    a method of torch's called on the list's owner when that is a module or an optimizer
    (``model.to(device)``; a tracker's own ``meter.step(loss)`` may keep it)."""
    named = found.groupdict()
    if library_owner and named.get("method") in _LIBRARY_METHODS:
        return False
    callee = named.get("callee")
    if callee is None:
        return True
    return callee not in _READERS and callee.split(".", 1)[0] not in _READER_MODULES


def _appending_helpers(scope: _Scope, appends: re.Pattern[str], depth: int = 0) -> list[str]:
    """How the scope calls the program's functions whose source appends as ``appends``
    matches, as regular expressions of their calls: methods of its ``self`` (``self.log``: a
    trainer's ``def log(self, name, value): self.logged.setdefault(name, []).append(value)``)
    and functions of its module (``log``: ``def log(k, v): history[k].append(v)``), and those
    with ``depth``, those calling such a helper, through at most ``depth`` calls
    (``self.log_dict(metrics)``, whose loop calls ``self.log``)."""
    owner = scope.owner
    functions = [
        (rf"self\s*\.\s*{re.escape(attribute)}", _function_of(value))
        for kind in (type(owner).__mro__ if owner is not None else ())
        for attribute, value in vars(kind).items()
    ]
    functions += [(re.escape(name), _function_of(value)) for name, value in scope.globals.items()]
    found = []
    others: list[tuple[str, list[str]]] = []  # (the functions that append nothing themselves)
    for called, function in functions:
        code = function.__code__ if function is not None else None
        if code is None or code is scope.code or not frames.is_user_code(code):
            continue
        texts = _source_texts(code)
        if any(appends.search(text) for text in texts):
            found.append(called)
        else:
            others.append((called, texts))
    for _ in range(depth):  # and those calling one (self.log_dict calls self.log)
        calls = re.compile(rf"(?<![\w.])(?<!def )(?:{'|'.join(found)})\s*\(") if found else None
        more = [c for c, texts in others if calls and any(calls.search(t) for t in texts)]
        if not more:
            break
        found += more
        others = [(c, texts) for c, texts in others if c not in more]
    return found


#: calls between the scope and the function appending, through helpers of its own
#: (``self.log_dict(...)`` calling ``self.log(k, v)``)
_HELPER_DEPTH = 2


def _function_of(value: Any) -> Optional[types.FunctionType]:
    """The plain function a class or module attribute is (a static or class method's too);
    None for anything else, whose attributes are not read (they may run the program's code)."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    return value if isinstance(value, types.FunctionType) else None


def _message(root: Any, name: str, held: Any) -> Any:
    """``held``: the list (or deque) keeping ``root``, a tensor a backward() went through:
    the fix makes it a number (one element) or a detached tensor."""
    count = sum(1 for item in list(held) if _with_history(item))  # (one C copy: see _tail)
    nodes = footprint(graph_node(root)).nodes
    number = root.numel() == 1

    def build(described: list[Any], expression: str) -> str:
        loss = described[0].name if described else "the loss"
        fix = _fixed_call(expression, name, loss, number)
        if fix is None:
            loss = "loss" if loss.startswith("operand ") else loss
            fix = (
                f"`{name}.append({loss}.item())` (or `{loss}.detach()`)"
                if number
                else f"`{name}.append({loss}.detach())`"
            )
        return (
            f"`{expression}`: {name} keeps {count} tensors that carry autograd history, one "
            f"per iteration, and with each its graph (about {nodes} autograd nodes each; "
            f"backward() freed their saved tensors, the nodes stay): memory grows every "
            f"iteration. Keep {'a number or ' if number else ''}a detached tensor: {fix}."
        )

    return build


def _fixed_call(
    expression: str, holder: str, tensor: str = "", number: bool = True
) -> Optional[str]:
    """The line's call with the tensor it keeps made a number: ``record(losses,
    loss.item())``, ``tracker.update(loss.item())``, ``history.append((epoch, loss.item()))``
    (the last plain name among the call's arguments, inside a tuple, list or dict too, other
    than the list's; ``tensor``, the kept tensor's name, where it is one of them), and the
    ``.detach()`` alternative (alone, unless ``number``: a tensor of several elements has no
    ``.item()``); None when there is none. A call handing an expression
    (``prios.append(td_error.mean())``) has it made so."""
    text = expression.split("#", 1)[0].strip()
    statement = naming.parsed_statement(text)
    call = statement.value if isinstance(statement, ast.Expr) else None
    if not isinstance(call, ast.Call):
        return None
    holder_names = {holder, holder.rpartition(".")[2]}
    names: list[ast.expr] = [
        node
        for argument in call.args
        for node in _plain_values(argument)
        if isinstance(node, ast.Name) and node.id not in holder_names
    ]
    if not names and len(call.args) == 1 and isinstance(call.args[0], (ast.Call, ast.Attribute)):
        names = [call.args[0]]  # (an expression handed as it is)
    if not names:
        return None
    kept = next((n for n in names if isinstance(n, ast.Name) and n.id == tensor), names[-1])
    start, end = kept.col_offset, kept.end_col_offset
    if kept.lineno != 1 or kept.end_lineno != 1 or end is None:
        return None
    if text[start:end] != ast.unparse(kept) and not isinstance(kept, ast.Name):
        return None
    if isinstance(kept, ast.Name) and text[start:end] != kept.id:
        return None
    made = [text[:end] + suffix + text[end:] for suffix in (".item()", ".detach()")]
    return f"`{made[0]}` (or `{made[1]}`)" if number else f"`{made[1]}`"


def _plain_values(node: ast.expr) -> list[ast.expr]:
    """``node`` itself, or the items of a tuple, list or dict it builds (one level)."""
    if isinstance(node, (ast.Tuple, ast.List)):
        return list(node.elts)
    if isinstance(node, ast.Dict):
        return list(node.values)
    return [node]


def _with_history(item: Any) -> bool:
    """Whether a list's item is, or a dict or tuple holding, a tensor with a ``grad_fn``."""
    return any(
        isinstance(value, _Tensor) and graph_node(value) is not None for value in _item_values(item)
    )


_CANDIDATES = "graph-kept.unused-candidates"
_WATCHED = "graph-kept.unused-watched"
#: candidates of one line remembered (the oldest is judged when the newest comes)
_CANDIDATES_PER_LINE = 2
#: in place of a line's candidates once it is judged: that line is not looked at again
_JUDGED = "judged"
#: lines after a loss's line searched for the ``append`` keeping it
_APPEND_LINES = 4
#: rule_state key: how often a line's candidates were looked for in a list
_ATTEMPTS = "graph-kept.unused-attempts"
#: times a line's candidates are looked for in a list before the line is let go
_ATTEMPTS_PER_LINE = 8
#: the same while the only lists found are forward hooks' lists still empty
_ATTEMPTS_WAITING = 32


@dataclass(eq=False)
class _Unused:
    """A loss a list keeps that no backward() has gone through (nothing of it kept alive)."""

    path: str
    line: int
    name: str
    saved_bytes: int
    nodes: int
    #: the kept tensors are one-element losses (a number is the fix) or outputs
    scalar: bool = True
    #: outputs of modules in eval mode (``model.eval()`` without ``torch.no_grad()``)
    evaluating: bool = False
    #: made in training after the backward() of what it was computed from (a step's metric)
    training: bool = False
    #: backward() calls before it was watched
    backwards: int = 0
    life: Optional[GraphLife] = None
    #: the user's call of the helper function whose list keeps them, in evaluation
    called_at: Optional[tuple[str, int, str]] = None
    #: the kept tensor (weakly), and ``id()`` of the helper's list that held it
    kept: Optional[Any] = None
    list_id: int = 0
    #: the helper's frame (``id()``, code) while it may still run; None once it returned
    helper: Optional[tuple[int, Any]] = None
    helper_returned: bool = False
    #: (name, line) of a total reported for accumulating tensors with history that the
    #: appending line reads (``history.append(total / n)`` of ``total += loss``)
    made_of: Optional[tuple[str, int]] = None


def _note_returned_helpers(state: Any) -> None:
    """Mark the watched helpers' calls that have returned (none of their frames on the stack):
    their lists went with them, what keeps the graph since is the caller's."""
    waiting = [w for w in state.rule_state.get(_WATCHED) or () if w.helper is not None]
    if not waiting:
        return
    running = set()
    frame: Optional[FrameType] = sys._getframe(1)
    for _ in range(_STACK * 2):
        if frame is None:
            break
        running.add((id(frame), frame.f_code))
        frame = frame.f_back
    for watched in waiting:
        if watched.helper not in running:
            watched.helper, watched.helper_returned = None, True


def _list_let_go(watched: _Unused) -> bool:
    """Whether the helper's list is gone while the graph of what it held lives on to the end
    (an ODE solver's ``torch.stack(ys)``, returned and kept by the caller): the list is not
    what keeps them, the caller is — reported at the call. Asked once, at the end: who refers
    to the kept tensor (the graph's saved tensors keep it alive)."""
    if watched.helper_returned:
        return True
    tensor = watched.kept() if watched.kept is not None else None
    if tensor is None:
        return False
    return all(id(referrer) != watched.list_id for referrer in gc.get_referrers(tensor))


#: rule_state key: a one-number tensor one scaled by a Python number -> that one (a weak
#: reference): the loss of a backward() root ``loss / accumulation_steps``
_SCALED = "graph-kept.scaled-roots"
_SCALINGS = frozenset({"div", "__truediv__", "true_divide", "mul", "__mul__", "__rmul__"})


def note_scaling(op: str, args: Any, out: Any, state: Any) -> None:
    """A sampled op: a one-number tensor with history scaled by a Python number is remembered
    with what it scaled, so that a list keeping the loss of ``(loss / accum).backward()`` is
    found as one keeping the root itself (a trainer logging ``loss`` in its training_step)."""
    if op not in _SCALINGS or not isinstance(out, _Tensor) or len(args) != 2:
        return
    tensor, number = args if isinstance(args[0], _Tensor) else args[::-1]
    if not isinstance(tensor, _Tensor) or not isinstance(number, (int, float)):
        return
    if tensor.numel() != 1 or graph_node(tensor) is None:
        return
    scaled: Optional[TensorMap[Any]] = state.rule_state.get(_SCALED)
    if scaled is None:
        scaled = state.rule_state[_SCALED] = TensorMap(capacity=16)
    try:
        scaled.set(out, weakref.ref(tensor))
    except TypeError:  # a tensor type without weak references
        return


def observe(
    op: str,
    out: Any,
    caller: FrameType,
    state: Any,
    backwards: int,
    emit: Callable[[Report], None],
    totals: Callable[[Any, str], list[tuple[str, int]]],
) -> None:
    """A sampled op's result: remember it as a candidate of its user line and op (a line may
    run several ops each iteration: `dist.log_prob(action)`), judge the oldest (see the
    module's docstring). ``backwards``: backward() calls so far; ``emit(report)`` reports one
    whose graph went without a backward(); ``totals(state, path)``: ``(name, line)`` of the
    totals in the file ``path`` reported for accumulating tensors with history (graph-kept's
    ``reported_totals``)."""
    if not isinstance(out, _Tensor) or graph_node(out) is None:
        return
    _note_returned_helpers(state)
    user = frames.user_frame(caller)
    if user is None or not frames.is_user_code(user.f_code):
        return
    key = (id(user.f_code) + user.f_lasti, op)
    lines: dict[tuple[int, str], Any] = state.rule_state.setdefault(_CANDIDATES, {})
    candidates = lines.get(key)
    if candidates is None:
        candidates = lines[key] = []
    elif candidates is _JUDGED:
        return
    try:
        candidates.append((weakref.ref(out), backwards, threading.get_ident()))
    except TypeError:  # a tensor type without weak references
        return
    if len(candidates) < _CANDIDATES_PER_LINE:
        return
    ref, made_at, thread = candidates.pop(0)
    oldest = ref()
    # (another thread's tensor is not looked at: its backward() runs without the GIL, and
    # reading its graph's saved tensors meanwhile crashes in PyTorch's storage objects)
    if oldest is None or thread != threading.get_ident():
        return
    # (backward() calls ran since it was made: an evaluation's result, or a training metric
    # computed after the step's backward(), `metrics["mae"].append(F.l1_loss(out, y))`)
    after_backward = made_at != backwards
    training = False
    if after_backward and not _evaluation_kept(oldest, user):
        if not _training_kept(oldest):
            _kept_after_backward(oldest, user, key, state, emit)
            return
        training = True
    # kept across iterations, no backward yet: the list keeping it, looked for a few times (a
    # line running several ops, as `dist.log_prob(action)` does, has candidates no list holds)
    callers = _user_frames(user)
    appends, found = _kept_by(callers, oldest)
    if found is not None:
        holder, name, line = found
        path, kept = holder.f_code.co_filename, oldest
    else:  # or a forward hook's list: `features.append(output)` in the hook
        hook_lists = _hook_appends(callers)
        hooked = _hook_keeping(hook_lists, oldest)
        if hooked is None:
            attempts: dict[tuple[int, str], int] = state.rule_state.setdefault(_ATTEMPTS, {})
            attempts[key] = tried = attempts.get(key, 0) + 1
            # (hooks' lists all empty yet: the hooked layer may come later in the forward)
            waiting = not appends and not any(held for _, _, _, held, _ in hook_lists)
            if tried >= (_ATTEMPTS_WAITING if waiting else _ATTEMPTS_PER_LINE) or not (
                appends or hook_lists
            ):
                lines[key] = _JUDGED
            return
        path, name, line, kept, holder = hooked
        if not in_eval_mode(footprint(graph_node(kept)).leaves, holder):
            # (in training, a backward() may have gone through it before it is watched: only
            # an evaluation's are judged)
            return
    lines[key] = _JUDGED  # watched, once
    pending = state.rule_state.setdefault(_WATCHED, [])
    if any(_watching(other, path, line) for other in pending):
        return  # (another op's result in the same list: one finding)
    node = graph_node(kept)
    walked = footprint(node)
    scalar = kept.numel() == 1
    evaluating = not scalar and in_eval_mode(walked.leaves, holder)
    watched = _Unused(
        path=path,
        line=line,
        name=_SETDEFAULT.sub(r"\1[\2]", name),
        saved_bytes=walked.saved_bytes,
        nodes=walked.nodes,
        scalar=scalar,
        evaluating=evaluating,
        training=training and not evaluating,
        backwards=backwards,
        # (a list of the helper's own frame: a forward hook's list outlives its call)
        called_at=_helper_call(holder, callers) if evaluating and found is not None else None,
    )
    watched.made_of = _total_read(totals(state, path), path, line)
    if watched.called_at is not None:  # (whether the list still holds it, see _list_let_go)
        held = _resolve(holder, name)
        try:
            watched.kept = weakref.ref(kept)
        except TypeError:
            watched.called_at = None
        watched.list_id = id(held)
        watched.helper = (id(holder), holder.f_code)
    watched.life = GraphLife(functools.partial(_graph_gone, watched, state, emit))
    # the nodes it was computed from too: a backward() through them (the best of several
    # heads' outputs, of which the list keeps all) is one through what the list keeps; not
    # for a tensor made after a backward() went through them (a metric of the step's output)
    upstream = [] if watched.training else _ancestors(node)
    if all([watched.life.hold(n) for n in (node, *upstream)]):
        pending.append(watched)


def _kept_after_backward(
    tensor: Any, user: FrameType, key: tuple[int, str], state: Any, emit: Callable[[Report], None]
) -> None:
    """``tensor``, made at the line of ``key`` before the last backward() and alive at that
    line's next run, is part of a graph a backward() went through (``prios.append(td_error)``,
    ``preds.append(pred)``, ``window.append(td_error.mean())`` after ``loss.backward()``): a
    list or deque keeping one each step keeps each step's graph nodes, as a list of the losses
    themselves does (:func:`check`). Reported at its ``append`` once that list grew over two
    optimizer steps (:func:`_grew`); the line is let go after a few looks that find none."""
    done: set[tuple[int, str]] = state.rule_state.setdefault(_AFTER_BACKWARD_DONE, set())
    if key in done:
        return
    node = graph_node(tensor)
    if node is None or not freed_by_backward(node):
        return
    # (the rest of the step: the append comes after its backward() and step())
    appends, found = _kept_by(_user_frames(user), tensor, _STEP_LINES)
    held: Any = _resolve(found[0], found[1]) if found is not None else None
    if found is None or not _growing(held):
        attempts: dict[tuple[int, str], int] = state.rule_state.setdefault(
            _AFTER_BACKWARD_ATTEMPTS, {}
        )
        attempts[key] = tried = attempts.get(key, 0) + 1
        if tried >= _ATTEMPTS_PER_LINE or not appends:
            done.add(key)
        return
    holder, name, line = found
    path = holder.f_code.co_filename
    if not _grew(state, (path, line, name), held):
        return
    done.add(key)
    message = _message(tensor, name, held)
    emit(Report(tensors=[tensor], message=message, frame=holder, at=(path, line), operands=False))


def _total_read(totals: list[tuple[str, int]], path: str, line: int) -> Optional[tuple[str, int]]:
    """The reported total of ``totals`` (``(name, line)``: ``total += loss``) the appending line
    ``path:line`` reads, if one: what its list keeps is made of it."""
    text = naming.without_comments(naming.source_line(path, line))
    for total, at in totals:
        if at != line and re.search(rf"(?<![\w.]){re.escape(total)}(?![\w])", text):
            return total, at
    return None


def _evaluation_kept(tensor: Any, user: FrameType) -> bool:
    """Whether ``tensor``, alive across training steps (backward() calls ran since it was
    made), is an evaluation's result no backward went through: once an epoch,
    ``val_losses.append(criterion(model(xv), yv))`` after ``model.eval()`` without
    ``torch.no_grad()``. Its saved tensors are not freed, and the modules it ran are in eval
    mode."""
    node = graph_node(tensor)
    if node is None or freed_by_backward(node):
        return False
    # (no module the frame names in eval mode: not walked, `probs` kept for a training metric)
    if all(sub.training for named in named_modules(user) for sub in named.modules()):
        return False
    return in_eval_mode(footprint(node, saved=False).leaves, user)


def _training_kept(tensor: Any) -> bool:
    """Whether ``tensor``, alive across training steps, carries a graph no backward() went
    through (its own saved tensors are there) that was made after the backward() of the graph
    it was computed from: a metric of the step's output kept for the epoch's mean
    (``metrics["mae"].append(F.l1_loss(out, y))`` after ``loss.backward()``), which keeps the
    output alive, and its nodes, every step."""
    node = graph_node(tensor)
    if node is None or freed_by_backward(node):
        return False
    # (a node upstream whose saved tensors a backward() freed: the step's forward)
    return any(freed_by_backward(n, limit=1) for n in _ancestors(node))


def _helper_call(holder: FrameType, callers: list[FrameType]) -> Optional[tuple[str, int, str]]:
    """Where the user's code calls the function whose list keeps the outputs, when that is a
    helper (an ODE solver's ``ys.append(y)``, a ``predict()``): ``(path, line, function)``.
    In evaluation the fix is there — the call under ``torch.no_grad()`` — not in the helper,
    which training may call too."""
    index = next((i for i, frame in enumerate(callers) if frame is holder), None)
    if index is None or index + 1 >= len(callers):
        return None
    caller = callers[index + 1]
    return caller.f_code.co_filename, caller.f_lineno, holder.f_code.co_name


def _watching(watched: _Unused, path: str, line: int) -> bool:
    """Whether ``watched`` is a list appended at ``path:line`` that may still be reported."""
    life = watched.life
    return (
        (watched.path, watched.line) == (path, line)
        and life is not None
        and life.alive
        and not life.consumed
    )


def _kept_by(
    callers: list[FrameType], tensor: Any, window: int = 0
) -> tuple[list[tuple[FrameType, str, int]], Optional[tuple[FrameType, str, int]]]:
    """The ``append`` lines of ``callers`` that may keep ``tensor`` (:func:`_appending`, over
    ``window`` lines where given), and the one whose list (or helper's list) holds it, if any."""
    appends = [
        (frame, name, line)
        for frame in callers
        for name, line in _appending(frame.f_code, frame.f_lineno, window)
    ]
    return appends, _keeping_list(appends, tensor) or _helper_keeping(callers, tensor)


def _keeping_list(
    appends: list[tuple[FrameType, str, int]], tensor: Any
) -> Optional[tuple[FrameType, str, int]]:
    """Of the ``append`` lines that may keep ``tensor`` (``(frame, list name, line)``: on the
    op's user line or the next lines, in that frame or, where the tensor is handed back
    (``return self.head(h)``, ``return action, dist.log_prob(action)``), in the frames calling
    it), the one whose list holds it; None when none does."""
    for frame, name, line in appends:
        held = _resolve(frame, name)  # the list (and the tensor in it, not a temporary)
        if _growing(held) and _holds(held, tensor, _JUDGED_TAIL):
            return frame, name, line
    return None


#: frames walked up from an op, at most, for the user's frames a tensor is handed back to (a
#: module call adds two of torch's)
_STACK = 32
#: list items looked at, from the end, for a candidate (sampled one op in 64, it may be
#: hundreds of items back)
_JUDGED_TAIL = 4096


_HookList = tuple[str, str, int, list[Any], FrameType]


def _hook_appends(callers: list[FrameType]) -> list[_HookList]:
    """The lists the forward hooks of the modules ``callers`` name append to (``def hook(m, i,
    o): features.append(o)``, a ``SaveOutput`` object's ``self.outputs``): ``(path, list as
    written, line, the list, the frame naming the module)``, global hooks too."""
    found: list[_HookList] = []
    seen: set[int] = set()
    for frame in callers:
        hooks = list(_global_forward_hooks().values())
        for module in named_modules(frame):
            for sub in module.modules():
                hooks.extend(sub._forward_hooks.values())
        for hook in hooks:
            if id(hook) not in seen:
                seen.add(id(hook))
                found.extend((*listed, frame) for listed in _hook_lists(hook))
    return found


def _global_forward_hooks() -> dict[Any, Any]:
    hooks = getattr(torch.nn.modules.module, "_global_forward_hooks", None)
    return hooks if isinstance(hooks, dict) else {}


def _hook_lists(hook: Any) -> list[tuple[str, str, int, list[Any]]]:
    """``(path, name, line, list)`` of each ``name.append(`` in the hook's own source, the list
    read from its closure, its globals or its object (``self.outputs``) without running code of
    the program's."""
    function: Any = hook
    owner = None
    while isinstance(function, functools.partial):
        function = function.func
    if isinstance(function, types.MethodType):
        function, owner = function.__func__, function.__self__
    elif not isinstance(function, types.FunctionType):  # a callable object: SaveOutput()
        function, owner = inspect.getattr_static(type(function), "__call__", None), function
    if not isinstance(function, types.FunctionType) or not frames.is_user_code(function.__code__):
        return []
    code = function.__code__
    found = []
    for line in _code_lines(code):
        appended = _APPEND.search(linecache.getline(code.co_filename, line))
        if appended is None:
            continue
        name = appended.group(1)
        for held in _hook_list(function, owner, name):
            found.append((code.co_filename, name, line, held))
    return found


def _hook_list(function: types.FunctionType, owner: Any, name: str) -> list[list[Any]]:
    """The list ``name`` is in the hook ``function`` (bound to ``owner``); every list of the
    dict for ``features[key]``."""
    base, item, _ = name.partition("[")
    first, *attributes = base.split(".")
    code = function.__code__
    try:
        if first == "self" and owner is not None:
            value = owner
        elif first in code.co_freevars and function.__closure__ is not None:
            value = function.__closure__[code.co_freevars.index(first)].cell_contents
        else:
            value = function.__globals__.get(first)
        for attribute in attributes:  # instance attributes only: no property of the program runs
            value = vars(value).get(attribute)
    except (TypeError, ValueError):  # no __dict__; a cell not filled yet
        return []
    if isinstance(value, list):
        return [] if item else [value]
    if item and isinstance(value, dict):  # (a defaultdict(list) too: its values() runs no code)
        return [v for v in value.values() if isinstance(v, list)]
    return []


def _hook_keeping(
    hook_lists: list[_HookList], tensor: Any
) -> Optional[tuple[str, str, int, Any, FrameType]]:
    """Of the hooks' lists, one that keeps a tensor with autograd history made before
    ``tensor`` (an earlier forward's, the list not emptied since: a list cleared every step,
    which holds only the running forward's, is let go; the op sampled need not be the hooked
    layer's), the latest such; ``(path, name, line, that tensor, the frame naming the
    module)``, or None."""
    made = _sequence_number(tensor)
    if made is None:
        return None
    for path, name, line, held, frame in hook_lists:
        tail = held[-_HOOK_TAIL:]
        for item in reversed(tail):
            number = _sequence_number(item)
            if number is not None and number < made:
                return path, name, line, item, frame
    return None


#: a hook list's items looked at, from the end (a hook on several layers adds several a step)
_HOOK_TAIL = 64


def _sequence_number(item: Any) -> Optional[int]:
    """The autograd sequence number of ``item``'s node (in the order nodes were made); None
    for what has none."""
    node = graph_node(item) if isinstance(item, _Tensor) else None
    try:
        return int(node._sequence_nr()) if node is not None else None
    except Exception:
        return None


def _user_frames(user: FrameType) -> list[FrameType]:
    """``user`` and the next user frames calling it (:data:`_FRAMES` at most)."""
    found: list[FrameType] = []
    frame: Optional[FrameType] = user
    for _ in range(_STACK):
        if frame is None or len(found) >= _FRAMES:
            break
        if frames.is_user_code(frame.f_code):
            found.append(frame)
        frame = frame.f_back
    return found


#: nodes a loss's graph was computed from that are watched with it (:func:`_ancestors`)
_ANCESTORS = 32


def _ancestors(node: Any) -> list[Any]:
    """Up to :data:`_ANCESTORS` nodes upstream of ``node``, nearest first, without the
    ``AccumulateGrad`` nodes of parameters (which every graph of the model shares)."""
    found: list[Any] = []
    seen = {node}  # the nodes themselves (see graph_walk.node_key)
    queue = collections.deque([node])
    with torch._C.DisableTorchFunction():
        while queue and len(found) < _ANCESTORS:
            for next_node, _ in queue.popleft().next_functions:
                if next_node is None or next_node in seen:
                    continue
                seen.add(next_node)
                if not accumulates_grad(next_node):
                    found.append(next_node)
                    queue.append(next_node)
    return found[:_ANCESTORS]


def _appending(code: Any, line: int, window: int = 0) -> list[tuple[str, int]]:
    """``(list, line)`` of each ``append`` that may keep what ``line`` makes: that line's own
    (``losses.append(criterion(...))``), or the next lines appending a name it assigns
    (``loss = criterion(...)`` then ``losses.append(loss)``; ``action, log_prob = act(obs)``
    then ``actions.append(action)`` and ``log_probs.append(log_prob)``). Read from the source:
    a frame's locals are not looked at (reading them on 3.11 and 3.12 keeps their values alive
    until the frame returns)."""
    text = linecache.getline(code.co_filename, line)
    found = _APPEND.search(text)
    if found:
        return [(found.group(1), line)]
    names, later = _assigned_then(code, line, window)
    appends = []
    for number in later:
        text = linecache.getline(code.co_filename, number)
        found = _APPEND.search(text)
        # (the name itself, not `val.item()` or `loss.detach()`: those keep no graph)
        if found and re.search(rf"\b({names})\b(?!\s*[.(\[])", text[found.end(1) :]):
            appends.append((found.group(1), number))
    return appends


def _assigned_then(code: Any, line: int, window: int = 0) -> tuple[str, list[int]]:
    """The names ``line`` assigns (``loss``, ``action|log_prob``: a regular expression) and
    the next :data:`_APPEND_LINES` lines of ``code`` (or ``window`` lines, where given);
    ``("", [])`` when it assigns none."""
    text = linecache.getline(code.co_filename, line)
    assigned = re.match(r"\s*([A-Za-z_][\w\s,]*?)\s*=[^=]", text)
    if not assigned:
        return "", []
    names = "|".join(n.strip() for n in assigned.group(1).split(",") if n.strip())
    later = [n for n in _code_lines(code) if n > line]
    return names, later[: window or _APPEND_LINES]


#: lines after a tensor's, at most, looked at for the append keeping it after a backward()
_STEP_LINES = 16
#: rule_state keys: the (site, op) keys :func:`_kept_after_backward` is done with, and its
#: looks per key (its own: the candidates' table stays the other checks', which a line the
#: training step uses may still need in an evaluation)
_AFTER_BACKWARD_DONE = "graph-kept.after-backward-done"
_AFTER_BACKWARD_ATTEMPTS = "graph-kept.after-backward-attempts"


#: a line appending to some list (in a helper's source)
_ANY_APPEND = re.compile(r"\.\s*(?:append|extend)\s*\(")


def _helper_keeping(callers: list[FrameType], tensor: Any) -> Optional[tuple[FrameType, str, int]]:
    """``self.log("val_loss", loss)`` on a line after the one making ``loss``, whose method
    appends what it is given to a list of ``self`` (or a module function's to a module list):
    ``(frame, the list as the frame names it, the call's line)`` when one of the frame's lists
    holds ``tensor``; None otherwise."""
    for frame in callers:
        code = frame.f_code
        names, later = _assigned_then(code, frame.f_lineno)
        helpers = _appending_helpers(_scope(frame), _ANY_APPEND) if names else []
        helpers += _appending_methods(frame, later) if names else []
        if not helpers:
            continue
        call = re.compile(
            rf"(?<![\w.])(?<!def )(?:{'|'.join(helpers)})\s*\((?:[^()#]|\([^()]*\))*"
            rf"(?<![\w.])(?:{names})(?![\w.(\[])"
        )
        for number in later:
            if not call.search(linecache.getline(code.co_filename, number)):
                continue
            for name, held in _lists(frame):
                if _holds(held, tensor, _JUDGED_TAIL):
                    return frame, name, number
    return None


def _appending_methods(frame: FrameType, lines: list[int]) -> list[str]:
    """The calls on ``lines`` of methods of the program's objects the frame names (not
    ``self``'s: :func:`_appending_helpers`) whose source appends, as regular expressions of
    those calls (``rb.add(s, a, r)``): a replay buffer's ``add`` appending what it is handed to
    ``self.storage`` is how RL programs keep transitions."""
    code = frame.f_code
    local = frames.read_locals(frame)
    found = []
    for number in lines:
        for owner_name, attribute in _CALL.findall(linecache.getline(code.co_filename, number)):
            if not owner_name or owner_name == "self":
                continue
            owner = local.get(owner_name, frame.f_globals.get(owner_name))
            function = _method_of(owner, attribute) if _plain_object(owner) else None
            if function is None or not frames.is_user_code(function.__code__):
                continue
            if any(_ANY_APPEND.search(text) for text in _source_texts(function.__code__)):
                found.append(rf"{re.escape(owner_name)}\s*\.\s*{re.escape(attribute)}")
    return found


def _resolve(frame: FrameType, name: str) -> Any:
    """The object ``name`` (``losses``, ``self.outputs``, ``history["val"]``,
    ``history.setdefault(key, [])``) is in ``frame``; None when it cannot be read without
    running the program's code (a property, an item of anything but a dict, a key that is no
    literal or local string or int)."""
    statement = naming.parsed_statement(name)
    if not isinstance(statement, ast.Expr):
        return None
    return _value_of(statement.value, frames.read_locals(frame), frame.f_globals)


def _value_of(node: ast.expr, scope: dict[str, Any], globals_: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        return scope.get(node.id, globals_.get(node.id))
    if isinstance(node, ast.Attribute):  # instance attributes only: no property of it runs
        try:
            return vars(_value_of(node.value, scope, globals_)).get(node.attr)
        except TypeError:
            return None
    if isinstance(node, ast.Subscript):
        container, key_node = node.value, node.slice
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "setdefault"
        and node.args
    ):
        container, key_node = node.func.value, node.args[0]
    else:
        return None
    held = _value_of(container, scope, globals_)
    if isinstance(key_node, ast.Constant):
        key = key_node.value
    elif isinstance(key_node, ast.Name):
        key = scope.get(key_node.id)
    else:
        return None
    if not isinstance(held, dict) or type(key) not in (str, int):
        return None
    return dict.get(held, key)  # (a defaultdict's factory does not run)


def forget_unused(state: Any) -> None:
    """Judge none of the watched losses (a backward() that would have gone through them
    raised)."""
    for watched in state.rule_state.pop(_WATCHED, None) or ():
        if watched.life is not None:
            watched.life.forget()


#: ``NAME.append(ARG...`` with ``NAME`` a name, attribute or item (``self.outputs``)
#: ``hist.setdefault(KEY, [])``, the list ``hist[KEY]`` as a message names it
_SETDEFAULT = re.compile(r"^(.*)\.setdefault\(\s*([^,]+?)\s*,.*\)$")
_APPEND = re.compile(
    r"([A-Za-z_][\w.]*(?:\[[^\]]*\]|\.setdefault\((?:[^()]|\([^()]*\))*\))?)\s*\.\s*append"
    r"\s*\((\s*[A-Za-z_]\w*)?"
)


def _graph_gone(
    watched: _Unused, state: Any, emit: Callable[[Report], None], life: GraphLife
) -> None:
    """The watched loss's graph is freed: report it unless a backward() went through it."""
    if not life.consumed and _kept_for_nothing(watched, state):
        emit(_unused_report(watched, "they were dropped"))


def _kept_for_nothing(watched: _Unused, state: Any) -> bool:
    """Losses kept without a backward() through them are reported (an evaluation loop's, in
    training mode too); outputs only when the modules were in eval mode, or when several
    backward() calls ran while the list kept them (a PPO rollout, whose update recomputes what
    it needs over epochs of minibatches): a list of outputs an inner loop fills and a line reads
    at once (``torch.cat(goodness).argmax(1)`` over ten labels, an ensemble's predictions) or
    whose best item one backward() goes through (multiple-choice learning over separate
    networks, the hardest of several negatives) keeps little for long."""
    if watched.scalar or watched.evaluating:
        return True
    return int(state.rule_state.get(BACKWARDS, 0)) - watched.backwards >= KEPT_AFTER


def finish_unused(state: Any) -> list[Report]:
    """At the end of the program: the watched losses still alive, no backward() through them."""
    reports = []
    for watched in state.rule_state.get(_WATCHED) or ():
        life = watched.life
        if (
            life is not None
            and life.alive
            and not life.consumed
            and _kept_for_nothing(watched, state)
        ):
            life.forget()
            reports.append(_unused_report(watched, "the program ended"))
    return reports


def _unused_report(watched: _Unused, until: str) -> Report:
    if watched.called_at is not None and _list_let_go(watched):
        return _helper_report(watched, until, watched.called_at)

    def build(described: list[Any], expression: str) -> str:
        where, each = _kept_each(watched)
        keep = (
            "a number (`.item()`) or a detached tensor (`.detach()`)"
            if watched.scalar
            else "a detached tensor (`.detach()`, and `.cpu()` to free the device's memory)"
        )
        otherwise = (
            "compute it under `torch.no_grad()` (the training step's backward() does not need it)"
            if watched.training
            else "run the loop under `torch.no_grad()` when it needs no gradient"
        )
        text = (
            f"`{expression}` ({where}): {watched.name} kept a tensor that carries autograd "
            f"history each iteration, and no backward() went through them: each kept its graph "
            f"({each}) alive until {until}."
        )
        if watched.made_of is not None:  # (the cause, reported at its own line)
            total, at = watched.made_of
            return (
                f"{text} They are made of {total}, which accumulates tensors with history at "
                f"{os.path.basename(watched.path)}:{at} (reported there): accumulating numbers "
                f"there (`.item()`) fixes this line too."
            )
        return f"{text} Append {keep}, or {otherwise}."

    return Report(
        tensors=[], message=build, frame=None, at=(watched.path, watched.line), operands=False
    )


def _kept_each(watched: _Unused) -> tuple[str, str]:
    """The appending line (``file:line``) and what each kept item holds, in words."""
    each = f"about {watched.nodes} autograd nodes"
    if watched.saved_bytes:
        each += f" and {size_text(watched.saved_bytes)} of saved activations"
    return f"{os.path.basename(watched.path)}:{watched.line}", each


def _helper_report(watched: _Unused, until: str, called_at: tuple[str, int, str]) -> Report:
    """Outputs of modules in eval mode kept by a helper's list: reported at the call."""
    path, line, function = called_at

    def build(described: list[Any], expression: str) -> str:
        where, each = _kept_each(watched)
        return (
            f"`{expression}`: {function}() runs here with gradients on while its modules are "
            f"in eval mode: the outputs its list {watched.name} holds ({where}) carry autograd "
            f"history that no backward() went through, each keeping its graph ({each}) alive until "
            f"{until}. Call {function}() under `torch.no_grad()` here (it needs no gradient "
            f"in evaluation; training's calls are unaffected), or keep its result "
            f"`.detach()`ed."
        )

    return Report(tensors=[], message=build, frame=None, at=(path, line), operands=False)
