// package.json's debugger contribution against the TypeScript interface and the Python rules.
import * as assert from "assert";
import * as fs from "fs";
import * as path from "path";
import { RULE_GROUPS, RULE_IDS } from "../src/common/constants";
import { ATTACH_ATTRIBUTES, LAUNCH_ATTRIBUTES } from "../src/debug/types";

const root = path.resolve(__dirname, "..", "..");
const manifest = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8"));
const debuggerContribution = manifest.contributes.debuggers[0];

describe("package.json", () => {
  it("declares the tensor-dap debug type for Python", () => {
    assert.strictEqual(debuggerContribution.type, "tensor-dap");
    assert.strictEqual(debuggerContribution.label, "tensor-dap (PyTorch)");
    assert.deepStrictEqual(debuggerContribution.languages, ["python"]);
    assert.deepStrictEqual(manifest.contributes.breakpoints, [{ language: "python" }]);
  });

  it("launch and attach attributes mirror the TypeScript interface", () => {
    const attributes = debuggerContribution.configurationAttributes;
    assert.deepStrictEqual(Object.keys(attributes.launch.properties).sort(), [...LAUNCH_ATTRIBUTES].sort());
    assert.deepStrictEqual(Object.keys(attributes.attach.properties).sort(), [...ATTACH_ATTRIBUTES].sort());
  });

  it("offers every rule id and group wherever rules are listed", () => {
    const expected = [...RULE_GROUPS, ...RULE_IDS].sort();
    const attributes = debuggerContribution.configurationAttributes;
    assert.deepStrictEqual([...attributes.launch.properties.tensorBreakpoints.items.enum].sort(), expected);
    assert.deepStrictEqual([...attributes.attach.properties.tensorBreakpoints.items.enum].sort(), expected);
    const setting = manifest.contributes.configuration.properties["tensorDap.defaultRules"];
    assert.deepStrictEqual([...setting.items.enum].sort(), expected);
  });

  it("rule ids are the Python package's catalogue's", function () {
    const source = path.resolve(root, "..", "tensor_dap", "catalog.py");
    if (!fs.existsSync(source)) {
      this.skip();
    }
    const ids = [...fs.readFileSync(source, "utf8").matchAll(/Rule\(\s*"([a-z-]+)"/g)].map((m) => m[1]);
    assert.ok(ids.length > 0, "no Rule(...) entries in tensor_dap/catalog.py");
    assert.deepStrictEqual(ids, [...RULE_IDS]);
  });

  it("has snippets for the current file (also with a memory limit), a module and attach", () => {
    const labels = debuggerContribution.configurationSnippets.map((s: { label: string }) => s.label);
    assert.deepStrictEqual(labels, [
      "tensor-dap: current file",
      "tensor-dap: current file with a memory limit",
      "tensor-dap: module",
      "tensor-dap: attach",
    ]);
    for (const snippet of debuggerContribution.configurationSnippets) {
      assert.strictEqual(snippet.body.type, "tensor-dap");
    }
  });

  it("View Tensor is offered in VARIABLES for tensor-dap sessions only", () => {
    const menu = manifest.contributes.menus["debug/variables/context"];
    assert.deepStrictEqual(menu, [
      {
        command: "tensorDap.viewTensor",
        when: "debugType == 'tensor-dap' && debugProtocolVariableMenuContext == 'tensor'",
        group: "navigation",
      },
    ]);
    const commands = manifest.contributes.commands.map((c: { command: string }) => c.command).sort();
    assert.deepStrictEqual(commands, ["tensorDap.restartLanguageServer", "tensorDap.showOutput", "tensorDap.viewTensor"]);
  });

  it("activates on debugging and Python", () => {
    for (const event of ["onDebug", "onDebugResolve:tensor-dap", "onLanguage:python"]) {
      assert.ok(manifest.activationEvents.includes(event), event);
    }
  });
});
