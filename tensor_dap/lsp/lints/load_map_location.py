"""``load-without-map-location``: ``torch.load(...)`` without ``map_location``, a hint.

Only where loading on another device is plausible: a script that saves with ``torch.save``
itself loads on the device it saved from (a round trip in one run), so it is left alone.
"""

from __future__ import annotations

import ast
from typing import Iterator

from .ast_helpers import has_keyword, is_torch_call, span
from .context import LintContext
from .fixes import add_keyword_edit
from .model import Lint, LintSpec

CODE = "load-without-map-location"


def check(context: LintContext) -> Iterator[Lint]:
    if any(is_torch_call(node, {"save"}) for node in context.nodes):
        return
    for node in context.nodes:
        if (
            is_torch_call(node, {"load"})
            and isinstance(node, ast.Call)
            and len(node.args) < 2
            and not has_keyword(node, "map_location")
        ):
            yield Lint(
                CODE,
                "`torch.load` restores tensors on the device they were saved from. This "
                "matters when the file was saved on a device this machine lacks (a checkpoint "
                "from a GPU, loaded on a CPU-only machine or another GPU), where the load "
                'fails. `map_location="cpu"` (or the target device) loads anywhere.',
                *span(node),
                fix_title='Add `map_location="cpu"`',
                edits=(add_keyword_edit(node, 'map_location="cpu"'),),
            )


SPEC = LintSpec(
    CODE,
    "hint",
    "`torch.load` without `map_location` of a file this script did not save",
    check,
    needs=("load",),
)
