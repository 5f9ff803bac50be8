"""Who holds the tensors live at a pause, by the name a user would write.

The memory view (:mod:`tensor_dap.agent.memory_view`) says, for each storage, what keeps it
alive: a frame's variable (``loss in frame train``), an item of a container a frame holds
(``losses[3] in frame train``), a module's parameter, buffer or gradient (``model.fc.weight``,
``model.fc.weight.grad``), an optimizer's state (``optimizer.state[model.fc.weight]['exp_avg']``)
or a live autograd graph that saved it for backward. Names are found from the paused frames,
outermost first (so ``model`` in ``train`` names a module before ``self`` in its ``forward``);
modules and optimizers no frame names are named by their class. Everything here runs only
when the view is asked for, and returns tensors to the caller, which drops them.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import torch

from tensor_dap.agent.graph_nodes import graph_node, is_parameter, saved_tensors

_Tensor = torch.Tensor
_Module = torch.nn.Module
_Optimizer = torch.optim.Optimizer

#: items of one container looked at
MAX_ITEMS = 10_000
#: autograd nodes walked, all graphs together
MAX_NODES = 100_000

_NOT_OBJECTS = (type, types.ModuleType, types.FunctionType, types.MethodType)


@dataclass(frozen=True)
class Holder:
    #: "local", "parameter", "buffer", "grad", "optimizer", "graph"
    kind: str
    name: str


#: what a holder search yields: the tensor, who holds it, and the frame of a local (else None)
Held = tuple[Any, Holder, Optional[types.FrameType]]


class _Namer:
    """One search: the modules and optimizers named so far, and the parameters' names."""

    def __init__(self) -> None:
        self.modules: set[int] = set()
        self.optimizers: list[tuple[str, Any]] = []
        self.param_names: dict[int, str] = {}

    def frame(self, frame: types.FrameType) -> Iterator[Held]:
        where = f"in frame {frame.f_code.co_name}"
        for name, value in list(frame.f_locals.items()):
            if isinstance(value, _Tensor):
                yield value, Holder("local", f"{name} {where}"), frame
            elif isinstance(value, (list, tuple, dict)):
                yield from self._container(value, name, where)
            else:
                yield from self.value(value, name)
                if not isinstance(value, (_Module, _Optimizer, *_NOT_OBJECTS)):
                    yield from self._attributes(value, name)

    def value(self, value: Any, name: str) -> Iterator[Held]:
        """A module's or an optimizer's tensors, named from ``name``."""
        if isinstance(value, _Module) and id(value) not in self.modules:
            yield from self._module(value, name)
        elif isinstance(value, _Optimizer) and all(o is not value for _, o in self.optimizers):
            self.optimizers.append((name, value))  # named last: its parameters' names first

    def _container(self, container: Any, name: str, where: str) -> Iterator[Held]:
        items = container.items() if isinstance(container, dict) else enumerate(container)
        for count, (key, item) in enumerate(items):
            if count >= MAX_ITEMS:
                return
            if isinstance(item, _Tensor):
                yield item, Holder("local", f"{name}[{key!r}] {where}"), None
            else:
                yield from self.value(item, f"{name}[{key!r}]")

    def _attributes(self, obj: Any, name: str) -> Iterator[Held]:
        try:
            attributes = list(vars(obj).items())
        except TypeError:
            return
        for attribute, item in attributes[:MAX_ITEMS]:
            if isinstance(item, _Tensor):
                yield item, Holder("local", f"{name}.{attribute}"), None
            else:
                yield from self.value(item, f"{name}.{attribute}")

    def _module(self, module: Any, prefix: str) -> Iterator[Held]:
        for sub in module.modules():
            self.modules.add(id(sub))
        for name, param in module.named_parameters():
            full = f"{prefix}.{name}"
            self.param_names.setdefault(id(param), full)
            yield param, Holder("parameter", full), None
            grad = param.grad
            if grad is not None:
                yield grad, Holder("grad", f"{full}.grad"), None
        for name, buffer in module.named_buffers():
            yield buffer, Holder("buffer", f"{prefix}.{name}"), None

    def optimizer_states(self) -> Iterator[Held]:
        for prefix, optimizer in self.optimizers:
            numbers = {
                id(p): f"param {i}"
                for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"])
            }
            for param, state in list(optimizer.state.items()):
                pname = self.param_names.get(id(param)) or numbers.get(id(param), "?")
                for key, value in list(state.items()) if isinstance(state, dict) else ():
                    if isinstance(value, _Tensor):
                        yield value, Holder("optimizer", f"{prefix}.state[{pname}][{key!r}]"), None


def named_tensors(user_frames: list[types.FrameType], tracked: list[Any]) -> list[Held]:
    """Every tensor the paused frames name (outermost frame first), then the tensors of the
    modules and optimizers among ``tracked`` (the garbage collector's) no frame names (named by
    class)."""
    namer = _Namer()
    found: list[Held] = []
    for frame in user_frames:
        found.extend(namer.frame(frame))
    unnamed = [o for o in tracked if isinstance(o, (_Module, _Optimizer))]
    children = {id(c) for m in unnamed if isinstance(m, _Module) for c in m.children()}
    for obj in unnamed:
        if id(obj) not in children:
            found.extend(namer.value(obj, type(obj).__name__))
    found.extend(namer.optimizer_states())
    return found


def graph_holders(roots: list[tuple[Any, str]]) -> Iterator[Held]:
    """The tensors live autograd graphs saved for backward (parameters left out: modules name
    them), each node once, from the graphs of ``roots`` (tensor, name of the graph) in order."""
    seen: set[Any] = set()  # the nodes themselves (see graph_walk.node_key)
    for tensor, root_name in roots:
        node = graph_node(tensor)
        if node is None or node in seen:
            continue
        stack = [node]
        while stack and len(seen) < MAX_NODES:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            holder = Holder("graph", f"saved by {type(node).__name__} for {root_name}")
            for saved in saved_tensors(node):
                if not is_parameter(saved):
                    yield saved, holder, None
            stack.extend(n for n, _ in node.next_functions)
