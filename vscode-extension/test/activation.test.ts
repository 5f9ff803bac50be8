// The extension activated against a stand-in `vscode` module: what it registers, and the debug
// configuration provider and adapter factory working end to end with a real interpreter probe.

/* eslint-disable @typescript-eslint/no-explicit-any */
import * as assert from "assert";
import { spawnSync } from "child_process";
import * as fs from "fs";
import * as path from "path";
import type { ExtensionContext } from "vscode";
import { FakeState, installFakeVscode, newFakeState } from "./fakeVscode";

const state: FakeState = newFakeState({ "languageServer.enabled": false });
const vscode = installFakeVscode(state);
// loaded in `before`, once the stand-in is installed (an `import` would load it first)
let extension: typeof import("../src/extension");

const repoPython = path.resolve(__dirname, "..", "..", "..", ".venv", "bin", "python");

function pythonEditor(file: string): { document: any } {
  return { document: { languageId: "python", uri: vscode.Uri.file(file) } };
}

describe("activation (stand-in vscode)", () => {
  const subscriptions: { dispose(): void }[] = [];

  before(async () => {
    extension = await import("../src/extension");
    const context = {
      subscriptions,
      extensionUri: vscode.Uri.file("/ext"),
      extension: { packageJSON: { version: "0.1.0" } },
    };
    await extension.activate(context as unknown as ExtensionContext);
  });

  after(async () => {
    await extension.deactivate();
    subscriptions.forEach((s) => s.dispose());
  });

  it("registers the commands, the debugger parts and inline values", () => {
    assert.deepStrictEqual([...state.commands.keys()].sort(), [
      "tensorDap.restartLanguageServer",
      "tensorDap.showOutput",
      "tensorDap.viewTensor",
    ]);
    assert.deepStrictEqual(
      state.configProviders.map((p) => p.type),
      ["tensor-dap", "tensor-dap"],
    );
    assert.ok(state.adapterFactories.has("tensor-dap"));
    assert.ok(state.trackerFactories.has("tensor-dap"));
    assert.deepStrictEqual(state.inlineValueProviders[0].selector, { language: "python" });
  });

  it("the adapter is `<python> -m tensor_dap adapter` with the configuration's interpreter", async () => {
    const factory = state.adapterFactories.get("tensor-dap");
    const descriptor = await factory.createDebugAdapterDescriptor({ configuration: { python: "/venv/bin/python" } });
    assert.strictEqual(descriptor.command, "/venv/bin/python");
    assert.deepStrictEqual(descriptor.args, ["-m", "tensor_dap", "adapter"]);
  });

  it("the adapter is told the rules the configuration turns on, so their checkboxes start ticked", async () => {
    const factory = state.adapterFactories.get("tensor-dap");
    const told = await factory.createDebugAdapterDescriptor({
      configuration: { python: "/venv/bin/python", tensorBreakpoints: ["device-mismatch", "nan-inf"] },
    });
    assert.deepStrictEqual(told.args, ["-m", "tensor_dap", "adapter", "--rules", "device-mismatch,nan-inf"]);
    const none = await factory.createDebugAdapterDescriptor({
      configuration: { python: "/venv/bin/python", tensorBreakpoints: [] },
    });
    assert.deepStrictEqual(none.args, ["-m", "tensor_dap", "adapter", "--rules", ""]);
    const subprocess = await factory.createDebugAdapterDescriptor({
      configuration: { python: "/venv/bin/python", tensorBreakpoints: ["default"], subProcessId: 42 },
    });
    assert.deepStrictEqual(subprocess.args, ["-m", "tensor_dap", "adapter"]);
  });

  it("F5 on a Python file with tensor_dap installed gives a full configuration", async function () {
    if (!fs.existsSync(repoPython)) {
      this.skip();
    }
    this.timeout(60_000);
    state.settings.python = repoPython;
    state.settings.defaultRules = ["device-mismatch"];
    state.activeEditor = pythonEditor("/w/train.py");
    const provider = state.configProviders[0].provider;
    const resolved = await provider.resolveDebugConfiguration(undefined, {});
    const config = await provider.resolveDebugConfigurationWithSubstitutedVariables(undefined, resolved);
    assert.deepStrictEqual(config, {
      type: "tensor-dap",
      request: "launch",
      name: "tensor-dap: current file",
      program: "${file}",
      console: "integratedTerminal",
      justMyCode: true,
      python: repoPython,
      tensorBreakpoints: ["device-mismatch"],
    });
    assert.deepStrictEqual(state.errors, []);
  });

  it("a Python without tensor_dap stops the launch with one message and the fix", async function () {
    this.timeout(60_000);
    state.settings.python = "/nonexistent/bin/python";
    state.errors.length = 0;
    state.activeEditor = pythonEditor("/w/train.py");
    const provider = state.configProviders[0].provider;
    const resolved = await provider.resolveDebugConfiguration(undefined, {});
    assert.strictEqual(await provider.resolveDebugConfigurationWithSubstitutedVariables(undefined, resolved), undefined);
    assert.strictEqual(state.errors.length, 1);
    assert.match(state.errors[0], /cannot run the Python interpreter "\/nonexistent\/bin\/python" \(from the tensorDap.python setting\)/);
  });

  it("a Python without the tensor_dap package names the pip command", async function () {
    this.timeout(60_000);
    const system = "/usr/bin/python3";
    const probe = fs.existsSync(system) ? spawnSync(system, ["-c", "import tensor_dap"]) : undefined;
    if (!probe || probe.status === 0) {
      this.skip();
    }
    state.settings.python = system;
    state.errors.length = 0;
    const provider = state.configProviders[0].provider;
    const resolved = await provider.resolveDebugConfiguration(undefined, {});
    assert.strictEqual(await provider.resolveDebugConfigurationWithSubstitutedVariables(undefined, resolved), undefined);
    assert.deepStrictEqual(state.errors, [
      "tensor-dap is not installed in /usr/bin/python3 (from the tensorDap.python setting). Install it with: /usr/bin/python3 -m pip install --upgrade tensor-dap",
    ]);
  });

  it("inline values: lookups for names assigned up to the stopped line", () => {
    const lines = ["import torch", "x = torch.ones(2)", "y = x * 2", "z = y + 1"];
    const document = { lineCount: lines.length, lineAt: (i: number) => ({ text: lines[i] }) };
    state.activeDebugSession = { type: "tensor-dap" };
    const provider = state.inlineValueProviders[0].provider;
    const values = provider.provideInlineValues(
      document,
      new vscode.Range(0, 0, 3, 0),
      { frameId: 1, stoppedLocation: new vscode.Range(2, 0, 2, 9) },
    );
    assert.deepStrictEqual(
      values.map((v: any) => [v.variableName, v.range.start.line, v.range.start.character, v.range.end.character]),
      [
        ["x", 1, 0, 1],
        ["y", 2, 0, 1],
      ],
    );
    state.activeDebugSession = { type: "python" };
    assert.strictEqual(provider.provideInlineValues(document, new vscode.Range(0, 0, 3, 0), { frameId: 1, stoppedLocation: new vscode.Range(2, 0, 2, 9) }), undefined);
  });
});
