"""One rule catalogue: the rule modules, the CLI, the adapter and the VS Code extension's
manifest and constants all agree with ``tensor_dap.catalog``, which loads no torch."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tensor_dap import catalog
from tensor_dap.agent.rules import rule_modules
from tensor_dap.agent.rules.hooks import HOOKS

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = ROOT / "vscode-extension"


def _enums_naming_rules(node: object) -> list[list[str]]:
    """Every ``enum`` list in the manifest that holds a rule id."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "enum" and isinstance(value, list) and "broadcast" in value:
                found.append(value)
            else:
                found += _enums_naming_rules(value)
    elif isinstance(node, list):
        for item in node:
            found += _enums_naming_rules(item)
    return found


def test_the_extension_manifest_offers_exactly_the_catalogue() -> None:
    manifest = json.loads((EXTENSION / "package.json").read_text())
    enums = _enums_naming_rules(manifest)
    assert len(enums) == 3  # tensorBreakpoints (launch, attach) and tensorDap.defaultRules
    for enum in enums:
        assert enum == [*catalog.GROUPS, *catalog.RULE_IDS]


def test_the_extension_constants_list_the_catalogue() -> None:
    source = (EXTENSION / "src" / "common" / "constants.ts").read_text()
    ids = re.search(r"RULE_IDS = \[(.*?)\] as const", source, re.S)
    groups = re.search(r"RULE_GROUPS = \[(.*?)\] as const", source, re.S)
    assert ids and groups
    assert tuple(re.findall(r'"([^"]+)"', ids.group(1))) == catalog.RULE_IDS
    assert tuple(re.findall(r'"([^"]+)"', groups.group(1))) == catalog.GROUPS


def test_each_rule_module_is_its_catalogue_entry() -> None:
    modules = rule_modules()
    assert [m.RULE for m in modules] == list(catalog.RULES)
    assert [m.__name__.rsplit(".", 1)[1] for m in modules] == [r.module for r in catalog.RULES]


@pytest.mark.parametrize("module", rule_modules(), ids=lambda m: m.RULE.id)
def test_rule_hooks_take_what_their_protocol_says(module) -> None:  # noqa: ANN001
    for name, protocol in HOOKS.items():
        hook = getattr(module, name, None)
        if hook is None:
            continue
        expected = list(inspect.signature(protocol.__call__).parameters)[1:]  # minus self
        assert list(inspect.signature(hook).parameters) == expected, f"{module.__name__}.{name}"


def test_listing_the_rules_loads_no_torch() -> None:
    code = (
        "import sys, io; from tensor_dap import cli; "
        "sys.stdout = io.StringIO(); cli.main(['rules']); "
        "import tensor_dap.adapter.session; sys.stdout = sys.__stdout__; "
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


def test_tensor_dap_rules_prints_the_table_and_json() -> None:
    command = [sys.executable, "-m", "tensor_dap", "rules"]
    table = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert table.splitlines()[0].split()[:2] == ["id", "checkbox"]
    assert "nan-inf            NaN / Inf                 off      yes" in table
    listed = json.loads(
        subprocess.run([*command, "--json"], capture_output=True, text=True, check=True).stdout
    )
    assert [r["id"] for r in listed["rules"]] == list(catalog.RULE_IDS)
    assert listed["rules"][-1]["default"] is False and listed["rules"][-1]["reads_data"] is True


def test_the_launch_schema_offers_the_simulated_devices() -> None:
    manifest = json.loads((EXTENSION / "package.json").read_text())
    (debugger,) = manifest["contributes"]["debuggers"]
    launch = debugger["configurationAttributes"]["launch"]["properties"]
    assert tuple(launch["simulate"]["enum"]) == catalog.SIMULATE_KINDS
