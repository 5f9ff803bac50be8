// The interpreter that runs `python -m tensor_dap adapter|lsp`: the `tensorDap.python` setting,
// else the Python extension's selected interpreter (its `environments` API) when that extension is
// installed, else python3. And the check that tensor_dap is importable there, with one clear
// error message carrying the command that fixes it.

import { execFile } from "child_process";
import * as os from "os";
import * as vscode from "vscode";
import {
  chooseInterpreter,
  CheckResult,
  expandPath,
  Interpreter,
  interpretProbe,
  ProbeOutput,
  VERSION_ARGS,
} from "./interpreter";
import { logError, logInfo, logWarn } from "./log";
import { getSettings, workspaceFolderFor } from "./vscodeapi";

const PYTHON_EXTENSION = "ms-python.python";
const PROBE_TIMEOUT_MS = 30_000;

interface PythonEnvironmentsApi {
  getActiveEnvironmentPath(resource?: vscode.Uri): { id: string; path: string };
  resolveEnvironment(
    environment: { id: string; path: string } | string,
  ): Promise<{ executable: { uri?: vscode.Uri } } | undefined>;
  onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
}

async function environmentsApi(): Promise<PythonEnvironmentsApi | undefined> {
  const extension = vscode.extensions.getExtension(PYTHON_EXTENSION);
  if (!extension) {
    return undefined;
  }
  try {
    const api = extension.isActive ? extension.exports : await extension.activate();
    return api?.environments as PythonEnvironmentsApi | undefined;
  } catch (error) {
    logWarn(`the Python extension's API is unavailable: ${String(error)}`);
    return undefined;
  }
}

async function pythonExtensionInterpreter(resource?: vscode.Uri): Promise<string | undefined> {
  const api = await environmentsApi();
  if (!api) {
    return undefined;
  }
  try {
    const selected = api.getActiveEnvironmentPath(resource);
    const resolved = await api.resolveEnvironment(selected);
    return resolved?.executable.uri?.fsPath ?? selected.path;
  } catch (error) {
    logWarn(`could not read the Python extension's interpreter: ${String(error)}`);
    return undefined;
  }
}

/** The interpreter for `resource`'s folder (or the first folder). */
export async function resolveInterpreter(resource?: vscode.Uri): Promise<Interpreter> {
  const folder = workspaceFolderFor(resource);
  const setting = expandPath(getSettings(resource).python, {
    workspaceFolder: folder?.uri.fsPath,
    home: os.homedir(),
    env: process.env,
  });
  const fromExtension = setting ? undefined : await pythonExtensionInterpreter(resource);
  return chooseInterpreter(setting, fromExtension);
}

/** Fires when the Python extension's selected interpreter changes. */
export async function onDidChangePythonInterpreter(
  listener: () => void,
): Promise<vscode.Disposable | undefined> {
  const api = await environmentsApi();
  return api?.onDidChangeActiveEnvironmentPath?.(() => listener());
}

function probe(python: string): Promise<ProbeOutput> {
  return new Promise((resolve) => {
    execFile(
      python,
      VERSION_ARGS,
      { timeout: PROBE_TIMEOUT_MS, windowsHide: true },
      (error, stdout, stderr) => {
        const failure = error as (NodeJS.ErrnoException & { killed?: boolean; code?: unknown }) | null;
        if (failure && typeof failure.code === "string") {
          resolve({ spawnError: failure.code === "ENOENT" ? "not found" : failure.message, exitCode: null, stdout, stderr });
        } else if (failure?.killed) {
          resolve({ exitCode: null, stdout, stderr, timedOut: true });
        } else {
          resolve({ exitCode: failure ? (typeof failure.code === "number" ? failure.code : 1) : 0, stdout, stderr });
        }
      },
    );
  });
}

const good = new Map<string, string>();
const inFlight = new Map<string, Promise<CheckResult>>();
const showing = new Set<string>();

/** Forget earlier checks (the setting or the selected interpreter changed). */
export function forgetChecks(): void {
  good.clear();
}

/**
 * Whether `interpreter` has a usable tensor_dap. On failure, shows ONE error message (not one per
 * caller while it is up) with buttons that run, copy or configure the fix.
 */
export async function checkTensorDap(interpreter: Interpreter): Promise<CheckResult> {
  const known = good.get(interpreter.path);
  if (known) {
    return { ok: true, version: known };
  }
  let pending = inFlight.get(interpreter.path);
  if (!pending) {
    pending = probe(interpreter.path).then((output) => interpretProbe(interpreter, output));
    inFlight.set(interpreter.path, pending);
    pending.finally(() => inFlight.delete(interpreter.path)).catch(() => undefined);
  }
  const result = await pending;
  if (result.ok) {
    if (!good.has(interpreter.path)) {
      logInfo(`tensor_dap ${result.version} in ${interpreter.path} (${interpreter.source})`);
    }
    good.set(interpreter.path, result.version);
  } else {
    logError(result.message);
    void showProblem(interpreter.path, result);
  }
  return result;
}

async function showProblem(python: string, result: Exclude<CheckResult, { ok: true }>): Promise<void> {
  if (showing.has(python)) {
    return;
  }
  showing.add(python);
  try {
    const actions = result.fix ? ["Install in Terminal", "Copy Command", "Open Settings"] : ["Open Settings"];
    const choice = await vscode.window.showErrorMessage(result.message, ...actions);
    if (choice === "Install in Terminal" && result.fix) {
      const terminal = vscode.window.createTerminal("tensor-dap install");
      terminal.show();
      terminal.sendText(result.fix);
      forgetChecks();
    } else if (choice === "Copy Command" && result.fix) {
      await vscode.env.clipboard.writeText(result.fix);
    } else if (choice === "Open Settings") {
      await vscode.commands.executeCommand("workbench.action.openSettings", "tensorDap.python");
    }
  } finally {
    showing.delete(python);
  }
}
