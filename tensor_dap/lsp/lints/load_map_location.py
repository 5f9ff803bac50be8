"""``load-without-map-location``: ``torch.load(...)`` without ``map_location``."""

from __future__ import annotations

import ast
from typing import Iterator

from .ast_helpers import has_keyword, is_torch_call, span
from .context import LintContext
from .fixes import add_keyword_edit
from .model import Lint, LintSpec

CODE = "load-without-map-location"


def check(context: LintContext) -> Iterator[Lint]:
    for node in context.nodes:
        if (
            is_torch_call(node, {"load"})
            and isinstance(node, ast.Call)
            and len(node.args) < 2
            and not has_keyword(node, "map_location")
        ):
            yield Lint(
                CODE,
                "`torch.load` without `map_location` restores tensors on the device they were "
                "saved from, which fails where that device is missing (a CPU machine, another "
                'GPU). Pass `map_location="cpu"` (or the target device).',
                *span(node),
                fix_title='Add `map_location="cpu"`',
                edits=(add_keyword_edit(node, 'map_location="cpu"'),),
            )


SPEC = LintSpec(
    CODE,
    "information",
    "`torch.load` without `map_location`",
    check,
    needs=("load",),
)
