"""The memory view's snapshot in one process (the DAP tests drive it through the adapter): a
wrapper subclass counts on its own device, once; the memory books name lines the sampled
provenance missed; modules no frame names are named by class; ``self`` attributes are named."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import torch

from tensor_dap.agent import memory_view
from tensor_dap.agent.engine import Watch
from tensor_dap.testing import accelerator_device


def rows_here(snapshot: dict[str, Any], device: str) -> list[dict[str, Any]]:
    found = [d for d in snapshot["devices"] if d["device"] == device]
    return [r for d in found for r in d["lines"] if r["path"] == __file__]


def holders(row: dict[str, Any]) -> set[str]:
    return {h["name"] for h in row["holders"]}


def snapshot_under(watch: Watch, program: Any) -> dict[str, Any]:
    memory_view.bind(watch)
    try:
        with watch:
            return program()  # type: ignore[no-any-return]
    finally:
        memory_view._watch = None


def test_a_wrapper_counts_on_its_device_once_with_its_views() -> None:
    device = accelerator_device()

    def program() -> dict[str, Any]:
        ones = torch.ones(1000, device=device)
        head = ones[:10]  # noqa: F841 (held for the view)
        return memory_view.snapshot()

    snapshot = snapshot_under(Watch(rules=["grad-lost"]), program)
    (row,) = rows_here(snapshot, str(device))
    assert (row["op"], row["bytes"], row["count"]) == ("ones", 4000, 1)
    assert holders(row) == {"ones in frame program", "head in frame program"}
    assert all(r["bytes"] != 4000 for r in rows_here(snapshot, "cpu"))


def test_the_memory_books_name_lines_the_provenance_did_not_sample() -> None:
    def program() -> dict[str, Any]:
        kept = [torch.zeros(256) for _ in range(200)]  # noqa: F841 (held)
        return memory_view.snapshot()

    sampled = rows_here(snapshot_under(Watch(rules=["grad-lost"]), program), "cpu")
    booked = rows_here(snapshot_under(Watch(rules=["grad-lost"], memory=True), program), "cpu")
    assert sum(r["count"] for r in sampled) < 200
    ((row,),) = [[r for r in booked if r["op"] == "zeros"]]
    assert (row["count"], row["bytes"]) == (200, 200 * 1024)
    assert "kept[0] in frame program" in holders(row)


class Trainer:
    #: a module no frame names (only the garbage collector finds it)
    registry: list[Any] = []

    def __init__(self) -> None:
        self.model = torch.nn.Linear(8, 4)
        self.state = torch.ones(16)


def test_attributes_and_unnamed_modules_are_named_and_nothing_is_kept() -> None:
    Trainer.registry.append(torch.nn.GRUCell(3, 2))
    refs = [weakref.ref(Trainer.registry[0].weight_ih)]

    def program() -> dict[str, Any]:
        trainer = Trainer()
        refs.append(weakref.ref(trainer.state))
        return memory_view.snapshot()

    snapshot = snapshot_under(Watch(rules=["grad-lost"], memory=True), program)
    named = {h["name"] for d in snapshot["devices"] for r in d["lines"] for h in r["holders"]}
    assert {"trainer.model.weight", "trainer.state", "GRUCell.weight_ih"} <= named
    Trainer.registry.clear()
    gc.collect()
    assert [r() for r in refs] == [None, None]
