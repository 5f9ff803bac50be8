"""The former home of the static lints, now the :mod:`tensor_dap.lsp.lints` package (one module
per lint and a registry). Kept as a name for imports written before the split; new code imports
:mod:`tensor_dap.lsp.lints`."""

from __future__ import annotations

from .lints import (
    MAX_SOURCE,
    Edit,
    Lint,
    device_expression,
    device_fix,
    factory_without_device,
    lint,
    parse,
)
from .lints.cpu_accumulator import CODE as CPU_ACCUMULATOR
from .lints.data_write import CODE as DATA_WRITE
from .lints.leaf_rebound import CODE as LEAF_REBOUND
from .lints.load_map_location import CODE as LOAD_WITHOUT_MAP_LOCATION
from .lints.missing_zero_grad import CODE as MISSING_ZERO_GRAD

__all__ = [
    "CPU_ACCUMULATOR",
    "DATA_WRITE",
    "LEAF_REBOUND",
    "LOAD_WITHOUT_MAP_LOCATION",
    "MAX_SOURCE",
    "MISSING_ZERO_GRAD",
    "Edit",
    "Lint",
    "device_expression",
    "device_fix",
    "factory_without_device",
    "lint",
    "parse",
]
