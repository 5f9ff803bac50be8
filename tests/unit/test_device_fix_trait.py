"""The language server's ``device=`` fix for a runtime finding follows the rule catalogue's
``fix_device_at_origin`` trait, not a rule id written in the server."""

from __future__ import annotations

import ast
import dataclasses

import pytest
from lsprotocol import types

from tensor_dap import catalog
from tensor_dap.findings import Finding, Origin, TensorInfo
from tensor_dap.lsp.code_actions import code_actions, fixes_device_at_origin
from tensor_dap.lsp.store import FileData

PATH = "/project/train.py"
SOURCE = "import torch\ndevice = 'cuda'\ny = torch.zeros(6)\nz = y + torch.ones(6, device=device)\n"


def _titles(rule: str) -> list[str]:
    y = TensorInfo("y", (6,), "torch.float32", "cpu", origin=Origin(PATH, 3, "zeros"))
    finding = Finding(rule, PATH, 4, "`y + ...`: y is on cpu", tensors=[y])
    lines = SOURCE.splitlines(keepends=True)
    everything = types.Range(types.Position(0, 0), types.Position(len(lines), 0))
    found = code_actions(
        "file:///project/train.py",
        PATH,
        lines,
        ast.parse(SOURCE),
        [],
        FileData(findings=[finding]),
        False,
        everything,
        [],
    )
    return [action.title for action in found]


def test_device_mismatch_is_fixed_where_its_cpu_tensor_was_made() -> None:
    assert catalog.rule("device-mismatch").fix_device_at_origin
    assert _titles("device-mismatch") == ["Create y on the device: add `device=device`"]


def test_the_fix_follows_the_catalogue_trait(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _titles("leaves-device") == []
    traits = dict(catalog._BY_ID)
    traits["leaves-device"] = dataclasses.replace(
        traits["leaves-device"], fix_device_at_origin=True
    )
    traits["device-mismatch"] = dataclasses.replace(
        traits["device-mismatch"], fix_device_at_origin=False
    )
    monkeypatch.setattr(catalog, "_BY_ID", traits)
    assert _titles("leaves-device") == ["Create y on the device: add `device=device`"]
    assert _titles("device-mismatch") == []
    assert not fixes_device_at_origin(Finding("no-such-rule", PATH, 1, "?"))
