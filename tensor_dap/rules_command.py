"""``tensor-dap rules``: the rules of the catalogue as a table, or as JSON for tools.

Read from :mod:`tensor_dap.catalog` alone: listing the rules loads no torch.
"""

from __future__ import annotations

import json
from typing import TextIO

from tensor_dap.catalog import RULES

_COLUMNS = ("id", "checkbox", "default", "reads data", "what it reports")


def print_rules(out: TextIO, as_json: bool = False) -> int:
    if as_json:
        json.dump({"rules": [rule.as_dict() for rule in RULES]}, out, indent=2)
        out.write("\n")
        return 0
    rows = [
        (
            r.id,
            r.title,
            "on" if r.default else "off",
            "yes" if r.reads_data else "no",
            r.description,
        )
        for r in RULES
    ]
    widths = [max(len(row[i]) for row in [_COLUMNS, *rows]) for i in range(len(_COLUMNS) - 1)]
    for row in [_COLUMNS, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths)]
        out.write("  ".join([*cells, row[-1]]).rstrip() + "\n")
    out.write("\n--rules default: the rules marked on; --rules all: every rule; or a comma list.\n")
    return 0
