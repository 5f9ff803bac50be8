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
from typing import Any, Iterable, Iterator, Optional

import torch

from tensor_dap.agent.graph_nodes import graph_node, is_parameter, saved_tensors
from tensor_dap.agent.storage import storage_key

#: ``(node._sequence_nr(), type name)``: names a node without keeping it (nor its graph) alive
NodeKey = tuple[int, str]


def node_key(node: Any) -> NodeKey:
    """A name for ``node`` that stays the same while the node lives. Not ``id(node)``: before
    torch 2.13 a node does not keep its Python object alive, so the object ``t.grad_fn`` gave
    goes when nothing holds it and ``next_functions`` later gives a new one (another id) for
    the same node. The sequence number is the thread's count of nodes made (never reused in
    that thread); the type tells apart the nodes of other threads. For the same reason a
    graph walk keeps the nodes it has seen, not their ids."""
    return (int(node._sequence_nr()), type(node).__name__)


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


def breadth_first(roots: Iterable[Any], limit: int) -> Iterator[Any]:
    """Each node reachable from ``roots`` (themselves included), breadth first, each once,
    ``limit`` at most. The nodes are kept while walking, not their ids (see :func:`node_key`)."""
    queue = collections.deque(roots)
    seen: set[Any] = set()
    while queue and len(seen) < limit:
        node = queue.popleft()
        if node is None or node in seen:
            continue
        seen.add(node)
        yield node
        queue.extend(n for n, _ in node.next_functions)


def footprint(
    root: Any, stop: Optional[NodeKey] = None, limit: int = 20000, saved: bool = True
) -> Footprint:
    """Walk the graph from node ``root`` (at most ``limit`` nodes); ``saved=False`` leaves the
    saved tensors' bytes uncounted (a walk for the leaves only)."""
    found = Footprint()
    seen: set[Any] = set()  # the nodes themselves (see node_key)
    storages: set[Any] = set()
    queue = collections.deque([root])
    with torch._C.DisableTorchFunction():
        while queue:
            node = queue.popleft()
            if node is None or node in seen:
                continue
            if len(seen) >= limit:
                found.truncated = True
                break
            seen.add(node)
            if stop is not None and node_key(node) == stop:
                found.reached = True
            if saved:
                found.saved_bytes += _saved_bytes(node, storages)
            variable = getattr(node, "variable", None)
            if isinstance(variable, torch.Tensor):
                found.leaves.add(id(variable))
            queue.extend(next_node for next_node, _ in node.next_functions)
    found.nodes = len(seen)
    return found


#: nodes walked, at most, for the leaves upstream of a tensor whose history is cut
UPSTREAM_LIMIT = 5000


def upstream_leaves(tensors: list[Any]) -> Optional[frozenset[int]]:
    """``id()`` of the leaf tensors (parameters) whose gradient flows through ``tensors``: a
    leaf itself, or those its graph accumulates into; None when a graph is larger than
    :data:`UPSTREAM_LIMIT` nodes (not known). What ``grad-lost`` asks of a cut: did the
    parameter's use feed the tensor whose history was cut?"""
    found: set[int] = set()
    for tensor in tensors:
        node = graph_node(tensor)
        if node is None:
            found.add(id(tensor))
            continue
        walked = footprint(node, limit=UPSTREAM_LIMIT, saved=False)
        if walked.truncated:
            return None
        found |= walked.leaves
    return frozenset(found)


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
