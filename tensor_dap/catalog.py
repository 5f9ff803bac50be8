"""The rule catalogue: every rule's id, breakpoint checkbox title, description and traits.

Rule ids are a contract shared by the CLI (``--rules``), the debug adapter's exception
breakpoint filters, the trace store, the language server and the VS Code extension. This is the
only list of them. It imports no torch, so that ``tensor-dap --help``, ``tensor-dap rules``, the
adapter's ``initialize`` and the language server can list rules without loading it; the
extension's manifest and constants are checked against it (``tests/unit/test_catalog.py``).

Adding a rule: one entry here, one module in :mod:`tensor_dap.agent.rules` (named by
``module``), one sample script with ``# expect:`` markers (see CONTRIBUTING.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Rule:
    id: str
    #: label of the breakpoint checkbox in the editor
    title: str
    description: str
    #: on in ``default`` (``--rules default``, the adapter's ``["default"]``)
    default: bool = True
    #: reads tensor data (a device sync per op on an accelerator), so it is opt-in
    reads_data: bool = False
    #: cannot fire until a tensor on an accelerator was seen: left out of the per-op plans of a
    #: program that runs on the CPU only
    needs_accelerator: bool = False
    #: the module in :mod:`tensor_dap.agent.rules` holding its checks
    module: str = ""
    #: its fix is the device of a CPU tensor the finding names: the language server offers to
    #: add ``device=`` to the torch factory call that made it, at the tensor's origin line
    fix_device_at_origin: bool = False
    #: fires only with this option set (``memory-limit``: a limit): ``--rules all`` alone turns
    #: it on idle, so the bug corpus, run that way, has no bug of it
    needs_option: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


RULES: tuple[Rule, ...] = (
    Rule(
        "leaves-device",
        "Tensor leaves device",
        "User code copies a tensor from an accelerator to the CPU at every training step.",
        module="leaves_device",
    ),
    Rule(
        "device-mismatch",
        "Device mismatch",
        "An operation receives tensors on more than one device.",
        needs_accelerator=True,
        module="device_mismatch",
        fix_device_at_origin=True,
    ),
    Rule(
        "grad-lost",
        "grad_fn lost",
        "backward() is called on a tensor with no gradient history.",
        module="grad_lost",
    ),
    Rule(
        "inplace-saved",
        "In-place on saved tensor",
        "An in-place operation modifies a tensor autograd saved for backward.",
        module="inplace_saved",
    ),
    Rule(
        "broadcast",
        "Silent broadcast",
        "An elementwise op broadcasts inputs of different ranks to a larger result.",
        module="broadcast",
    ),
    Rule(
        "missing-zero-grad",
        "Missing zero_grad",
        "optimizer.step() applies gradients accumulated across steps.",
        module="missing_zero_grad",
    ),
    Rule(
        "optimizer-remade",
        "Optimizer made per step",
        "An optimizer with state (momentum, Adam's moments) is made again for the same "
        "parameters after each step, so its state starts over.",
        module="optimizer_remade",
    ),
    Rule(
        "stale-copy",
        "Stale parameter copy",
        "The program computes with a copy of a tensor an optimizer updates (w = w.to(device)).",
        module="stale_copy",
    ),
    Rule(
        "graph-kept",
        "Graph kept across steps",
        "A tensor carrying autograd history is accumulated across loop iterations.",
        module="graph_kept",
    ),
    Rule(
        "out-of-memory",
        "Out of memory",
        "An operation runs out of device memory: stop at its line before the stack unwinds.",
        module="out_of_memory",
    ),
    Rule(
        "memory-limit",
        "Memory limit",
        "Live tensor memory on a device passes the limit set (--memory-limit, tensorMemoryLimit).",
        default=False,
        module="memory_limit",
        needs_option="--memory-limit",
    ),
    Rule(
        "nan-inf",
        "NaN / Inf",
        "An operation produces NaN or Inf from finite inputs (reads data: opt-in).",
        default=False,
        reads_data=True,
        module="nan_inf",
    ),
)

RULE_IDS: tuple[str, ...] = tuple(rule.id for rule in RULES)

#: what ``--simulate`` and the launch attribute ``"simulate"`` accept (:mod:`tensor_dap.simulate`)
SIMULATE_KINDS: tuple[str, ...] = ("cuda",)

#: what ``--rules`` and ``tensorBreakpoints`` accept besides rule ids
GROUPS: tuple[str, ...] = ("default", "all")

_BY_ID = {rule.id: rule for rule in RULES}


def rule(rule_id: str) -> Rule:
    """The catalogue entry of ``rule_id`` (KeyError when there is none)."""
    return _BY_ID[rule_id]


def find(rule_id: str) -> Optional[Rule]:
    return _BY_ID.get(rule_id)


def default_rule_ids() -> list[str]:
    return [rule.id for rule in RULES if rule.default]
