// The View Tensor webview's HTML: a strict Content-Security-Policy (no inline code, scripts and
// styles only with the per-load nonce), the page's elements, the bundled dist/webview.js. Pure.

export function panelHtml(cspSource: string, scriptUri: string, nonce: string): string {
  const csp = [
    "default-src 'none'",
    `img-src ${cspSource} data:`,
    `style-src ${cspSource} 'nonce-${nonce}'`,
    `script-src 'nonce-${nonce}'`,
  ].join("; ");
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>View Tensor</title>
<style nonce="${nonce}">
  body { font-family: var(--vscode-font-family); color: var(--vscode-foreground); padding: 8px 16px; }
  h1 { font-size: 1.2em; margin: 4px 0; font-family: var(--vscode-editor-font-family); }
  .meta, .note, .status { color: var(--vscode-descriptionForeground); margin: 2px 0; }
  .error { color: var(--vscode-errorForeground); margin: 8px 0; }
  .counts { font-family: var(--vscode-editor-font-family); margin: 4px 0; }
  .counts .bad { color: var(--vscode-errorForeground); font-weight: bold; }
  canvas { display: block; margin: 8px 0; image-rendering: pixelated; border: 1px solid var(--vscode-panel-border); }
  .row { display: flex; align-items: center; gap: 8px; }
  .hover { font-family: var(--vscode-editor-font-family); min-height: 1.3em; }
  .hidden { display: none; }
  label { user-select: none; }
</style>
</head>
<body>
<h1 id="title">View Tensor</h1>
<div class="meta" id="meta"></div>
<div class="note" id="fetched"></div>
<div class="status" id="status"></div>
<div class="error hidden" id="error"></div>
<div id="content" class="hidden">
  <div class="note" id="drawn"></div>
  <canvas id="picture" aria-label="tensor picture"></canvas>
  <div class="row"><canvas id="colourbar" width="256" height="12" aria-label="colour scale"></canvas><span id="scale" class="note"></span></div>
  <div class="hover" id="hover"></div>
  <h2>Histogram</h2>
  <div class="counts" id="counts"></div>
  <div class="row"><label><input type="checkbox" id="log"> log counts</label></div>
  <canvas id="histogram" width="640" height="160" aria-label="histogram"></canvas>
  <div class="hover" id="binHover"></div>
</div>
<script nonce="${nonce}" src="${scriptUri}"></script>
</body>
</html>`;
}
