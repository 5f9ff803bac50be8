"""What a live autograd graph holds: how many nodes, and the bytes of the tensors they saved.

``graph-kept`` says how much memory a tensor accumulated across iterations keeps alive: the
nodes of every iteration's graph and, until a ``backward()`` frees them, the activations those
nodes saved. The walk reads autograd's bookkeeping only (node links, saved tensors' sizes and
storages), never tensor data, and stops after ``limit`` nodes. Parameters saved by a node are
not counted (the model holds them anyway); tensors sharing a storage count it once.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from tensor_dap.agent.graph_nodes import is_parameter, saved_tensors
from tensor_dap.agent.storage import storage_key

#: ``(id(node), node._sequence_nr())``: names a node without keeping it (nor its graph) alive
NodeKey = tuple[int, int]


def node_key(node: Any) -> NodeKey:
    return (id(node), int(node._sequence_nr()))


@dataclass
class Footprint:
    nodes: int = 0
    #: bytes of saved tensors not freed yet (parameters left out, each storage once)
    saved_bytes: int = 0
    #: the walk met the node ``stop`` named
    reached: bool = False
    #: the walk stopped at ``limit`` nodes
    truncated: bool = False
    #: ``id()`` of the leaf tensors (parameters) the graph accumulates gradients into (its
    #: ``AccumulateGrad`` nodes' ``variable``): ids only, nothing kept alive
    leaves: set[int] = field(default_factory=set)


def footprint(root: Any, stop: Optional[NodeKey] = None, limit: int = 20000) -> Footprint:
    """Walk the graph from node ``root`` (at most ``limit`` nodes)."""
    found = Footprint()
    seen: set[int] = set()
    storages: set[Any] = set()
    queue = collections.deque([root])
    with torch._C.DisableTorchFunction():
        while queue:
            node = queue.popleft()
            if node is None or id(node) in seen:
                continue
            if len(seen) >= limit:
                found.truncated = True
                break
            seen.add(id(node))
            if stop is not None and id(node) == stop[0] and node_key(node) == stop:
                found.reached = True
            found.saved_bytes += _saved_bytes(node, storages)
            variable = getattr(node, "variable", None)
            if isinstance(variable, torch.Tensor):
                found.leaves.add(id(variable))
            queue.extend(next_node for next_node, _ in node.next_functions)
    found.nodes = len(seen)
    return found


def _saved_bytes(node: Any, storages: set[Any]) -> int:
    total = 0
    for item in saved_tensors(node):
        if is_parameter(item):
            continue
        key = storage_key(item)
        if key is None or key in storages:
            continue
        storages.add(key)
        try:
            total += int(item.untyped_storage().nbytes())
        except Exception:
            total += int(item.numel() * item.element_size())
    return total
