// Renders the View Tensor webview outside VS Code, for a look or a screenshot:
//   python -c "import torch; from tensor_dap.render.picture import encode; print(encode(torch.randn(64, 64)))" > payload.json
//   npm run build && npx tsc -p . && node scripts/preview.mjs payload.json out/preview
//   chromium --headless --no-sandbox --disable-gpu --screenshot=shot.png --window-size=900,1000 out/preview/index.html
// The page is the panel's own HTML (same CSP, same dist/webview.js) with a stand-in for
// acquireVsCodeApi that answers the panel's "ready" with the payload, and VS Code's dark colours.
import * as fs from "fs";
import * as path from "path";
import { createRequire } from "module";

const require = createRequire(import.meta.url);
const { panelHtml } = require("../out/src/views/html.js");

const [payloadFile, outDir = "out/preview", title = "x"] = process.argv.slice(2);
if (!payloadFile) {
  console.error("usage: node scripts/preview.mjs PAYLOAD.json [OUT_DIR] [TITLE]");
  process.exit(2);
}
const payload = JSON.parse(fs.readFileSync(payloadFile, "utf8"));
fs.mkdirSync(outDir, { recursive: true });
fs.copyFileSync(path.join("dist", "webview.js"), path.join(outDir, "webview.js"));
const nonce = "preview0nonce";
const stub = `
window.acquireVsCodeApi = () => ({
  postMessage(message) {
    if (message.type === "ready") {
      window.postMessage({ type: "picture", title: ${JSON.stringify(title)}, data: ${JSON.stringify(payload)} }, "*");
    }
  },
});`;
const colours = `:root { --vscode-font-family: sans-serif; --vscode-editor-font-family: monospace;
  --vscode-foreground: #cccccc; --vscode-descriptionForeground: #9d9d9d; --vscode-errorForeground: #f48771;
  --vscode-panel-border: #444; --vscode-charts-blue: #3794ff; } body { background: #1e1e1e; }`;
let html = panelHtml("file:", "webview.js", nonce);
html = html.replace(
  `<script nonce="${nonce}" src="webview.js">`,
  `<script nonce="${nonce}">${stub}</script>\n<script nonce="${nonce}" src="webview.js">`,
);
html = html.replace(`<style nonce="${nonce}">`, `<style nonce="${nonce}">${colours}\n`);
fs.writeFileSync(path.join(outDir, "index.html"), html);
console.log(path.join(outDir, "index.html"));
