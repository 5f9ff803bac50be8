// The Tensor Memory view: its rows from a `tensorMemory` answer (memoryData.ts), and the tree
// provider against a stand-in `vscode` module and a fake paused session.

/* eslint-disable @typescript-eslint/no-explicit-any */
import * as assert from "assert";
import * as fs from "fs";
import * as path from "path";
import {
  explainMemoryError,
  holderText,
  lineText,
  MemorySnapshot,
  memoryRequestArguments,
  parseSnapshot,
  sizeText,
} from "../src/views/memoryData";
import { installFakeVscode, newFakeState } from "./fakeVscode";

const SNAPSHOT: MemorySnapshot = {
  devices: [
    {
      device: "cpu",
      bytes: 65536 + 4,
      count: 2,
      lines: [
        {
          path: "/work/train.py",
          line: 12,
          op: "randn",
          bytes: 65536,
          count: 1,
          holders: [
            { kind: "local", name: "x in frame train", bytes: 65536 },
            { kind: "graph", name: "saved by AddmmBackward0 for hidden in frame train", bytes: 65536 },
          ],
        },
        { path: "", line: 0, op: "", bytes: 4, count: 1, holders: [{ kind: "none", name: "nothing nameable (1 tensor)", bytes: 4 }] },
      ],
    },
  ],
};

describe("Tensor Memory rows", () => {
  it("reads sizes and lines as the debug console table does", () => {
    assert.strictEqual(sizeText(4), "4 B");
    assert.strictEqual(sizeText(65536), "64.0 KiB");
    assert.strictEqual(sizeText(3 * 1024 ** 3), "3.0 GiB");
    const line = lineText(SNAPSHOT.devices[0].lines[0]);
    assert.deepStrictEqual([line.label, line.description], ["train.py:12 randn", "64.0 KiB · 1 tensor"]);
    assert.match(line.tooltip, /\/work\/train\.py:12/);
    assert.strictEqual(lineText(SNAPSHOT.devices[0].lines[1]).label, "(no line recorded)");
    const step = { ...SNAPSHOT.devices[0].lines[1], op: "by optimizer.step()" };
    assert.strictEqual(lineText(step).label, "(no line recorded) by optimizer.step()");
    const holder = holderText(SNAPSHOT.devices[0].lines[0].holders[1]);
    assert.deepStrictEqual([holder.label, holder.description], [
      "saved by AddmmBackward0 for hidden in frame train",
      "64.0 KiB · saved for backward",
    ]);
  });

  it("asks in the selected frame, and says what went wrong in the user's terms", () => {
    assert.deepStrictEqual(memoryRequestArguments(3), { frameId: 3 });
    assert.deepStrictEqual(memoryRequestArguments(undefined), {});
    assert.throws(() => parseSnapshot({ nope: 1 }), /no devices/);
    assert.match(explainMemoryError("Unable to find thread for evaluation."), /running/);
    assert.match(explainMemoryError("ModuleNotFoundError: No module named 'tensor_dap'"), /pip install/);
  });

  it("package.json puts the view in the Run and Debug side bar for tensor-dap sessions", () => {
    const manifest = JSON.parse(fs.readFileSync(path.resolve(__dirname, "..", "..", "package.json"), "utf8"));
    assert.deepStrictEqual(manifest.contributes.views.debug, [
      { id: "tensorDap.memory", name: "Tensor Memory", when: "debugType == 'tensor-dap'" },
    ]);
  });
});

describe("Tensor Memory view (stand-in vscode)", () => {
  const state = newFakeState();
  let view: typeof import("../src/views/memoryView");

  before(async () => {
    // installed here, not at load: activation.test.ts installs its own first
    installFakeVscode(state);
    view = await import("../src/views/memoryView");
  });

  function session(answer: () => unknown): { asked: any[]; session: any } {
    const asked: any[] = [];
    return {
      asked,
      session: {
        id: "s1",
        type: "tensor-dap",
        customRequest: async (command: string, args: unknown) => {
          asked.push([command, args]);
          return answer();
        },
      },
    };
  }

  it("shows devices -> lines -> holders of the paused frame, fetched once per stop", async () => {
    const provider = new view.MemoryTreeProvider();
    const fake = session(() => SNAPSHOT);
    let changes = 0;
    provider.onDidChangeTreeData(() => changes++);
    assert.match((provider.getChildren() as any[])[0].text, /Pause a tensor-dap debug session/);

    provider.paused(fake.session, 7);
    assert.strictEqual(changes, 1);
    const devices = await provider.getChildren();
    await provider.getChildren();
    assert.deepStrictEqual(fake.asked, [["tensorMemory", { frameId: 7 }]]);
    const cpu = provider.getTreeItem(devices[0]);
    assert.deepStrictEqual([cpu.label, cpu.description, cpu.collapsibleState], ["cpu", "64.0 KiB · 2 tensors", 2]);

    const lines = await provider.getChildren(devices[0]);
    const first = provider.getTreeItem(lines[0]);
    assert.strictEqual(first.label, "train.py:12 randn");
    assert.strictEqual(first.command?.command, "vscode.open");
    const [uri, options] = first.command?.arguments ?? [];
    assert.strictEqual(uri.fsPath, "/work/train.py");
    assert.strictEqual(options.selection.start.line, 11);
    assert.strictEqual(provider.getTreeItem(lines[1]).command, undefined);

    const holders = await provider.getChildren(lines[0]);
    assert.deepStrictEqual(
      holders.map((h) => provider.getTreeItem(h).label),
      ["x in frame train", "saved by AddmmBackward0 for hidden in frame train"],
    );

    provider.paused(fake.session, 8); // another frame selected: asked again
    await provider.getChildren();
    assert.deepStrictEqual(fake.asked[1], ["tensorMemory", { frameId: 8 }]);
  });

  it("says when the program runs, the session ended or the request failed", async () => {
    const provider = new view.MemoryTreeProvider();
    const failing = session(() => {
      throw new Error("Unable to find thread for evaluation.");
    });
    provider.paused(failing.session);
    const [failed] = await provider.getChildren();
    assert.match(provider.getTreeItem(failed).label as string, /program is running/);
    provider.idle(failing.session, "Running… (updates when the program pauses)");
    const [running] = provider.getChildren() as any[];
    assert.match(running.text, /^Running/);
  });
});
