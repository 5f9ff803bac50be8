"""What the watch keeps of a *sample* of ops: where each output tensor was made, what the
trace recorder wants, and the rules' ``observe`` hooks.

The per-op path (:mod:`tensor_dap.agent.mode`) counts each call site's hits and hands the
first 8 of each site, then one in 64, to :func:`sample` (``Watch._sample``): a line run a
million times costs its provenance a few thousand times. The counts also answer how often a
line ran (:func:`line_hits`, for the trace store).
"""

from __future__ import annotations

import logging
from types import FrameType
from typing import TYPE_CHECKING, Any, Optional

import torch

from tensor_dap.agent import frames, optimizers
from tensor_dap.agent.graph_nodes import graph_node
from tensor_dap.agent.library_calls import REWRAPPING, api_called
from tensor_dap.agent.lineage import history
from tensor_dap.agent.op_kinds import OpInfo
from tensor_dap.agent.provenance import NODE_PROV_KEY, Prov, address_of

if TYPE_CHECKING:
    from tensor_dap.agent.engine import Watch

log = logging.getLogger("tensor_dap.engine")

_Tensor = torch.Tensor


def sample(
    watch: Watch,
    site: int,
    hits: int,
    info: OpInfo,
    args: tuple[Any, ...],
    out: Any,
    caller: FrameType,
    observers: tuple[Any, ...] = (),
) -> None:
    """Provenance, trace metadata and the rules' ``observe`` hooks for one sampled op of the
    call site ``site`` (``Watch._sample``)."""
    try:
        if hits == 1:
            _new_site(watch, site, caller)
        for rule_id, observe in observers:
            try:
                observe(info, args, out, caller, watch)
            except Exception:
                watch._rule_failed(rule_id)
        if isinstance(out, _Tensor):
            _record(watch, info, args, out, caller)
        elif info.name in _TO_PYTHON and args and isinstance(args[0], _Tensor):
            _record_handed_out(watch, info, args[0], out, caller)
        elif isinstance(out, tuple) or out.__class__ is list:
            for item in out:
                if isinstance(item, _Tensor):
                    _record(watch, info, args, item, caller)
        elif out.__class__ is float and args and isinstance(args[0], _Tensor):
            _record_number(watch, info, args[0], out, caller)
    except Exception:  # the engine must never break the user's op
        log.exception("tensor-dap: internal error after %s", info.name)


def _record(watch: Watch, info: OpInfo, args: tuple[Any, ...], out: Any, caller: FrameType) -> None:
    """Provenance of one op output, and what the trace recorder wants of it."""
    if not out.is_cpu and not watch.accelerator_seen and out.device.type != "meta":
        watch._saw_accelerator()
    user = frames.user_frame(caller)
    if user is None:
        return
    if watch.recorder is not None:
        watch.recorder.observe(user, out, caller is user)
    provenance = watch.provenance
    op_name = info.name
    if caller is not user:  # an op inside torch's code: name what the user called
        source = args[0] if args else None
        # (an optimizer's update of a leaf in a step(closure), LBFGS's `p.add_(...)`: the leaf
        # was not made there; nn.init's fill-ins and load_state_dict's copies name where it was)
        stepped = info.inplace and optimizers.closure_step() and out.requires_grad
        if stepped and out is source and graph_node(out) is None:
            return
        # (a detach in torch's code that cuts gradient history is a cut, not a re-wrap)
        if (
            op_name in REWRAPPING
            and isinstance(source, _Tensor)
            and (out.requires_grad or not source.requires_grad)
        ):
            inherited = provenance.lookup(source)
            if inherited is not None:
                provenance.record(out, inherited)
                return
        op_name = api_called(caller, user) or op_name
    if out.requires_grad and not (op_name in _NEW_LEAVES and graph_node(out) is None):
        prov = Prov(user.f_code.co_filename, user.f_lineno, op_name)
        node = graph_node(out)
        if node is not None:  # where this graph node was made (for inplace-saved)
            node.metadata[NODE_PROV_KEY] = prov
    else:  # keep how this tensor came to lack gradient history (for grad-lost)
        prov = history(op_name, args, user, provenance)
    provenance.record(out, prov)


#: factories making a new leaf of Python or NumPy data: one made with ``requires_grad=True``
#: keeps how its values lost their history too (``torch.tensor(loss.item(), requires_grad=True)``
#: trains nothing; grad-lost names the ``.item()``)
_NEW_LEAVES = frozenset({"tensor", "as_tensor", "asarray", "new_tensor"})

#: ops that hand a tensor's values to Python or NumPy: ``tolist`` (nested lists of numbers) and
#: ``numpy`` (an array on the tensor's memory)
_TO_PYTHON = frozenset({"tolist", "numpy"})


def _record_handed_out(
    watch: Watch, info: OpInfo, tensor: Any, out: Any, caller: FrameType
) -> None:
    """What ``tolist()`` and ``numpy()`` hand out, so that a tensor made of it again
    (``torch.tensor(h.tolist())``, ``torch.from_numpy(h.detach().numpy())``) names the cut:
    the first number of the lists, the address of the array's memory."""
    if info.name == "numpy":
        prov = watch.provenance.lookup(tensor)
        address = address_of(tensor)
        if prov is not None and prov.cut_at is not None and address:
            watch.provenance.record_array(address, prov)
        return
    first = out
    while first.__class__ is list and first:
        first = first[0]
    if first.__class__ is float:
        _record_number(watch, info, tensor, first, caller)


def _record_number(
    watch: Watch, info: OpInfo, tensor: Any, number: float, caller: FrameType
) -> None:
    """A Python number read from a tensor whose history was cut there (``loss.item()``) or
    before (``h.detach().item()``): kept, so that ``torch.tensor(losses)`` made of such numbers
    names the cut (see lineage.history)."""
    if not tensor.requires_grad:
        earlier = watch.provenance.lookup(tensor)
        if earlier is not None and earlier.cut_at is not None:
            watch.provenance.record_number(number, earlier)
        return
    user = frames.user_frame(caller)
    if user is not None:
        where = (user.f_code.co_filename, user.f_lineno)
        how = ".item()" if info.name == "item" else f"{info.name}()"
        cut = f"{how}, whose Python number keeps no gradient history"
        watch.provenance.record_number(number, Prov(*where, info.name, cut))


def _new_site(watch: Watch, site: int, caller: FrameType) -> None:
    """Remember the code object of a new call site (keeps it alive: site ids stay unique)."""
    code = caller.f_code
    entry = watch._site_codes.get(id(code))
    if entry is None:
        entry = watch._site_codes[id(code)] = (code, set())
    entry[1].add(site)


def line_hits(watch: Watch, code: Any, line: int) -> int:
    """How often ``line`` of ``code`` ran an op called directly from it (0 if never):
    ``Watch.line_hits``."""
    entry = watch._site_codes.get(id(code))
    if entry is None:
        return 0
    base = id(code)
    hits, before = watch._site_hits, watch._hits_before
    return max(
        (
            hits.get(site, 0) + before.get(site, 0)
            for site in list(entry[1])
            if line_of(code, site - base) == line
        ),
        default=0,
    )


_LINE_TABLES: dict[int, tuple[Any, list[tuple[int, int, Optional[int]]]]] = {}


def line_of(code: Any, lasti: int) -> Optional[int]:
    """The source line of the instruction at offset ``lasti`` in ``code``."""
    cached = _LINE_TABLES.get(id(code))
    table = cached[1] if cached is not None else None
    if table is None:
        if hasattr(code, "co_lines"):
            table = list(code.co_lines())
        else:  # Python 3.9
            import dis

            starts = list(dis.findlinestarts(code))
            ends = [offset for offset, _ in starts[1:]] + [len(code.co_code)]
            table = [(start, end, line) for (start, line), end in zip(starts, ends)]
        _LINE_TABLES[id(code)] = (code, table)
    for start, end, line in table:
        if start <= lasti < end:
            return line
    return None
