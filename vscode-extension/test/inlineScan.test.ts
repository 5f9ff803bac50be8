import * as assert from "assert";
import { assignedNames, functionStart, inlineNames, stripComment } from "../src/debug/inlineScan";

const names = (lines: string[], from = 0, to = lines.length - 1): string[] =>
  assignedNames(lines, from, to).map((n) => `${n.line}:${n.name}@${n.start}-${n.end}`);

describe("inline value scan", () => {
  it("finds plain, tuple, annotated and augmented assignments with columns", () => {
    const lines = [
      "x = torch.ones(3)",
      "a, (b, c) = f()",
      "w: torch.Tensor = torch.zeros(2)",
      "total += loss",
      "y[0] = 1",
      "self.w = w",
      "if x == 1:",
      "    print(y, sep='=')",
      "z = {'a': 1}  # c = 3",
      "m >>= 1",
      "f(k=1)",
    ];
    assert.deepStrictEqual(names(lines), [
      "0:x@0-1",
      "1:a@0-1",
      "1:b@4-5",
      "1:c@7-8",
      "2:w@0-1",
      "3:total@0-5",
      "5:self.w@0-6",
      "8:z@0-1",
      "9:m@0-1",
    ]);
  });

  it("finds loop and with targets and def parameters", () => {
    const lines = [
      "def step(model, batch: Tensor, lr=0.1):",
      "    for i, (x, y) in enumerate(batch):",
      "        with torch.no_grad() as ctx:",
      "            pass",
    ];
    assert.deepStrictEqual(
      assignedNames(lines, 0, 3).map((n) => n.name),
      ["model", "batch", "lr", "i", "x", "y", "ctx"],
    );
    const lr = assignedNames(lines, 0, 0).find((n) => n.name === "lr")!;
    assert.strictEqual(lines[0].slice(lr.start, lr.end), "lr");
  });

  it("keeps each name once, at its last assignment", () => {
    const lines = ["x = 1", "y = 2", "x = x + y"];
    assert.deepStrictEqual(names(lines), ["1:y@0-1", "2:x@0-1"]);
  });

  it("starts at the stopped function's def", () => {
    const lines = [
      "import torch",
      "g = 1",
      "def f(a):",
      "    b = a * 2",
      "",
      "    c = b + 1",
      "    return c",
      "h = f(g)",
    ];
    assert.strictEqual(functionStart(lines, 5), 2);
    assert.strictEqual(functionStart(lines, 7), 0);
    assert.deepStrictEqual(inlineNames(lines, 5, 0, 20).map((n) => n.name), ["a", "b", "c"]);
    // module level: everything up to the stopped line, not past it
    assert.deepStrictEqual(inlineNames(lines, 1, 0, 20).map((n) => n.name), ["g"]);
    // only the visible lines
    assert.deepStrictEqual(inlineNames(lines, 5, 4, 20).map((n) => n.name), ["c"]);
  });

  it("ignores comments but not # inside strings", () => {
    assert.strictEqual(stripComment("x = '#'  # note"), "x = '#'  ");
    assert.deepStrictEqual(names(["# x = 1", "s = \"a#b\""]), ["1:s@0-1"]);
  });
});
