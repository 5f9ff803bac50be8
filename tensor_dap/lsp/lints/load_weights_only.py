"""``load-without-weights-only``: ``torch.load(...)`` without ``weights_only``. PyTorch 2.6
changed its default to ``True``: a state dict loads as before, a whole pickled model fails, and
before 2.6 a file could run any code on load. The message says what to do for each: a state
dict gets ``weights_only=True`` (a safe fix, offered); a whole model is a warning."""

from __future__ import annotations

import ast
import re
from typing import Iterator, Optional

from .ast_helpers import called_name, has_keyword, is_torch_call, span
from .context import LintContext, walk_scope
from .fixes import add_keyword_edit
from .model import Lint, LintSpec
from .names import scope_body

CODE = "load-without-weights-only"
_MODEL_NAME = re.compile(r"(model|net)$", re.IGNORECASE)
_MODEL_USES = {"eval", "train", "parameters", "forward", "named_parameters", "modules"}


def _use(context: LintContext, call: ast.Call) -> Optional[str]:
    """``state_dict`` when the load feeds ``load_state_dict`` directly, ``model`` when its
    result is named like one (``model``, ``netG``) or used as a module (``model.eval()``,
    ``model(x)``), else None."""
    parent = context.parents.get(call)
    if isinstance(parent, ast.Call) and called_name(parent) == "load_state_dict":
        return "state_dict"
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        target = parent.targets[0]
        if isinstance(target, ast.Name) and _MODEL_NAME.search(target.id):
            return "model"
        if isinstance(target, ast.Name):
            for node in walk_scope(scope_body(context, call)):
                if isinstance(node, ast.Call):
                    func = node.func
                    if isinstance(func, ast.Name) and func.id == target.id:
                        return "model"
                    if (
                        isinstance(func, ast.Attribute)
                        and isinstance(func.value, ast.Name)
                        and func.value.id == target.id
                        and func.attr in _MODEL_USES
                    ):
                        return "model"
    return None


def check(context: LintContext) -> Iterator[Lint]:
    for node in context.nodes:
        if not (is_torch_call(node, {"load"}) and isinstance(node, ast.Call)):
            continue
        if has_keyword(node, "weights_only"):
            continue
        use = _use(context, node)
        if use == "model":
            yield Lint(
                CODE,
                "`torch.load` of a whole pickled model: since PyTorch 2.6 it defaults to "
                "`weights_only=True` and fails on this file. Save and load "
                "`model.state_dict()` instead (`model.load_state_dict(torch.load(path, "
                "weights_only=True))`), or pass `weights_only=False` only for files you trust: "
                "unpickling can run any code.",
                *span(node),
                severity="warning",
            )
            continue
        fix = add_keyword_edit(node, "weights_only=True")
        if use == "state_dict":
            yield Lint(
                CODE,
                "`torch.load` of a state dict without `weights_only`: pass `weights_only=True`, "
                "which loads tensors and plain containers only, so an untrusted file cannot run "
                "code (PyTorch 2.6+ does this by default; older versions unpickle anything).",
                *span(node),
                fix_title="Add `weights_only=True`",
                edits=(fix,),
                severity="hint",
            )
            continue
        yield Lint(
            CODE,
            "`torch.load` without `weights_only`: since PyTorch 2.6 it defaults to "
            "`weights_only=True`, which loads state dicts and plain containers of tensors but "
            "fails on a whole pickled model or objects of your own classes. For a state dict "
            "or checkpoint dict pass `weights_only=True`; for a full model load its "
            "`state_dict()` instead, or pass `weights_only=False` only for files you trust.",
            *span(node),
            fix_title="Add `weights_only=True` (for a state dict or checkpoint dict)",
            edits=(fix,),
        )


SPEC = LintSpec(
    CODE,
    "information",
    "`torch.load` without `weights_only` (PyTorch 2.6 changed its default)",
    check,
    needs=("load",),
)
