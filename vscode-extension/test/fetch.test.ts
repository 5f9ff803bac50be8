import * as assert from "assert";
import { evaluateArguments, explainEvaluateError, targetFromMenu, viewTensorExpression } from "../src/views/fetch";
import { readSettings, serverOptions } from "../src/common/settings";
import { panelHtml } from "../src/views/html";
import { styleHintLabel } from "../src/lsp/hints";

describe("View Tensor request", () => {
  it("evaluates picture.encode on the variable in the clipboard context, raw", () => {
    assert.strictEqual(
      viewTensorExpression("model.fc.weight"),
      "__import__('tensor_dap.render.picture', fromlist=['encode']).encode((model.fc.weight))",
    );
    assert.deepStrictEqual(evaluateArguments("x", 7), {
      expression: viewTensorExpression("x"),
      frameId: 7,
      context: "clipboard",
      format: { rawString: true },
    });
    assert.ok(!("frameId" in evaluateArguments("x", undefined)));
  });

  it("takes the variable from the VARIABLES context menu argument", () => {
    assert.deepStrictEqual(targetFromMenu({ container: {}, variable: { name: "w", evaluateName: "self.w", value: "tensor<>" } }), {
      name: "w",
      evaluateName: "self.w",
    });
    assert.match((targetFromMenu({ variable: { name: "statistics" } }) as { error: string }).error, /no expression/);
    assert.match((targetFromMenu(undefined) as { error: string }).error, /right-click a tensor/);
  });

  it("explains failed evaluations", () => {
    assert.match(explainEvaluateError("ModuleNotFoundError: No module named 'tensor_dap.render.picture'", "x"), /pip install --upgrade tensor-dap/);
    assert.strictEqual(explainEvaluateError("NameError: name 'x' is not defined", "x"), "x is not defined in the selected frame.");
    assert.strictEqual(explainEvaluateError("something else", "x"), "something else");
  });
});

describe("settings", () => {
  it("reads defaults and coerces odd values", () => {
    assert.deepStrictEqual(readSettings(() => undefined), {
      python: "",
      defaultRules: ["default"],
      hintsEnabled: true,
      hintsStyle: "full",
      tracePath: "",
      languageServerEnabled: true,
    });
    const values: Record<string, unknown> = { python: "/p", defaultRules: ["grad-lost"], "hints.enabled": false, "hints.style": "shape" };
    const settings = readSettings((key) => values[key]);
    assert.strictEqual(settings.python, "/p");
    assert.deepStrictEqual(settings.defaultRules, ["grad-lost"]);
    assert.deepStrictEqual(serverOptions(settings), { hints: { enabled: false, style: "shape" } });
    assert.strictEqual(readSettings((key) => (key === "hints.style" ? "weird" : undefined)).hintsStyle, "full");
  });

  it("hint style 'shape' keeps the shape (and the name prefix)", () => {
    assert.strictEqual(styleHintLabel("(64, 10) f32 cuda:0 grad", "shape"), "(64, 10)");
    assert.strictEqual(styleHintLabel("y: (6,) f32 cpu", "shape"), "y: (6,)");
    assert.strictEqual(styleHintLabel("(64, 10) f32 cuda:0 grad", "full"), "(64, 10) f32 cuda:0 grad");
    assert.strictEqual(styleHintLabel("3 x int", "shape"), "3 x int");
  });
});

describe("View Tensor page", () => {
  it("allows only nonce'd scripts and styles (no inline code, no other sources)", () => {
    const page: string = panelHtml("vscode-resource:", "vscode-resource:/dist/webview.js", "N0NCE");
    const csp = /Content-Security-Policy" content="([^"]*)"/.exec(page)![1];
    assert.deepStrictEqual(csp.split("; "), [
      "default-src 'none'",
      "img-src vscode-resource: data:",
      "style-src vscode-resource: 'nonce-N0NCE'",
      "script-src 'nonce-N0NCE'",
    ]);
    assert.ok(!page.includes("unsafe"));
    assert.deepStrictEqual(page.match(/<script[^>]*>/g), ['<script nonce="N0NCE" src="vscode-resource:/dist/webview.js">']);
    assert.ok(!/ style="/.test(page), "inline style attributes are blocked by the CSP");
    for (const id of ["picture", "colourbar", "histogram", "counts", "error", "status"]) {
      assert.ok(page.includes(`id="${id}"`), id);
    }
  });
});
