"""Static lints for ``textDocument/publishDiagnostics`` and ``tensor-dap lint``: known PyTorch
pitfalls found in the source alone, without a run.

Pure functions over the source text (:func:`lint`), so they are unit-testable; the diagnostics
feature publishes them next to the findings of the last run, the code action feature turns their
:class:`Edit` lists into quick fixes, and ``tensor-dap lint`` prints them. One module per lint,
each declaring a :class:`LintSpec`; :data:`LINTS` is the registry.

Positions are the ``ast``'s: 1-based lines, UTF-8 byte columns. A source that does not parse
has no lints. Each check errs on the side of silence: none may flag a correct idiom.
"""

from __future__ import annotations

from .ast_helpers import device_expression, factory_without_device
from .context import MAX_SOURCE, parse
from .fixes import device_fix
from .model import SEVERITIES, Edit, Lint, LintSpec
from .registry import BY_CODE, LINTS, lint, severity
from .suppression import ignore_edit

__all__ = [
    "BY_CODE",
    "LINTS",
    "MAX_SOURCE",
    "SEVERITIES",
    "Edit",
    "Lint",
    "LintSpec",
    "device_expression",
    "device_fix",
    "factory_without_device",
    "ignore_edit",
    "lint",
    "parse",
    "severity",
]
