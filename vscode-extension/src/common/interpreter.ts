// Which Python runs the adapter and the language server, and whether its tensor_dap is usable.
// Pure: no `vscode` import and no process spawning (python.ts does those), so that the choice and
// the messages are unit-tested in Node.

import { MIN_TENSOR_DAP_VERSION, PIP_PACKAGE } from "./constants";

export type InterpreterSource = "setting" | "python-extension" | "default" | "configuration";

export interface Interpreter {
  path: string;
  source: InterpreterSource;
}

export const DEFAULT_PYTHON = process.platform === "win32" ? "python" : "python3";

/** `${workspaceFolder}`, `${userHome}`, `${env:NAME}` and a leading `~` in a path setting. */
export function expandPath(
  value: string,
  vars: { workspaceFolder?: string; home?: string; env?: Record<string, string | undefined> },
): string {
  let out = value.trim();
  if (vars.home && (out === "~" || out.startsWith("~/"))) {
    out = vars.home + out.slice(1);
  }
  out = out.replace(/\$\{(workspaceFolder|userHome|env:([A-Za-z_][A-Za-z0-9_]*))\}/g, (all, key, name) => {
    if (key === "workspaceFolder") {
      return vars.workspaceFolder ?? all;
    }
    if (key === "userHome") {
      return vars.home ?? all;
    }
    return vars.env?.[name] ?? "";
  });
  return out;
}

/** The setting first, then the Python extension's active interpreter, then python3. */
export function chooseInterpreter(setting: string | undefined, fromPythonExtension: string | undefined): Interpreter {
  if (setting && setting.trim()) {
    return { path: setting.trim(), source: "setting" };
  }
  if (fromPythonExtension && fromPythonExtension.trim()) {
    return { path: fromPythonExtension.trim(), source: "python-extension" };
  }
  return { path: DEFAULT_PYTHON, source: "default" };
}

/** The command that prints tensor_dap's version (argv after the interpreter). */
export const VERSION_ARGS = ["-c", "import tensor_dap, sys; print(tensor_dap.__version__)"];

/** `1.2.3rc1` -> [1, 2, 3]; undefined when there is no leading number. */
export function parseVersion(text: string): number[] | undefined {
  const match = /^\s*v?(\d+(?:\.\d+)*)/.exec(text);
  if (!match) {
    return undefined;
  }
  return match[1].split(".").map((part) => Number.parseInt(part, 10));
}

export function compareVersions(a: number[], b: number[]): number {
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const diff = (a[i] ?? 0) - (b[i] ?? 0);
    if (diff !== 0) {
      return diff < 0 ? -1 : 1;
    }
  }
  return 0;
}

/** What running VERSION_ARGS gave. */
export interface ProbeOutput {
  /** The spawn failed (ENOENT: no such interpreter). */
  spawnError?: string;
  exitCode: number | null;
  stdout: string;
  stderr: string;
  timedOut?: boolean;
}

export type CheckResult =
  | { ok: true; version: string }
  | { ok: false; problem: "no-python" | "not-installed" | "too-old" | "broken"; message: string; fix?: string };

export function installCommand(python: string): string {
  const quoted = /[\s"'$`\\]/.test(python) ? `"${python.replace(/(["$`\\])/g, "\\$1")}"` : python;
  return `${quoted} -m pip install --upgrade ${PIP_PACKAGE}`;
}

function where(interpreter: Interpreter): string {
  switch (interpreter.source) {
    case "setting":
      return "(from the tensorDap.python setting)";
    case "python-extension":
      return "(the Python extension's selected interpreter)";
    case "configuration":
      return '(the debug configuration\'s "python")';
    default:
      return "(no tensorDap.python setting and no Python extension interpreter)";
  }
}

/** Turns the probe's output into ONE message that says what is wrong and how to fix it. */
export function interpretProbe(
  interpreter: Interpreter,
  probe: ProbeOutput,
  minimum: string = MIN_TENSOR_DAP_VERSION,
): CheckResult {
  const python = interpreter.path;
  if (probe.spawnError) {
    return {
      ok: false,
      problem: "no-python",
      message: `tensor-dap: cannot run the Python interpreter "${python}" ${where(interpreter)}: ${probe.spawnError}. Set "tensorDap.python" to a Python with PyTorch, or select an interpreter with the Python extension.`,
    };
  }
  if (probe.timedOut) {
    return {
      ok: false,
      problem: "broken",
      message: `tensor-dap: "${python} -c 'import tensor_dap'" did not answer in time ${where(interpreter)}.`,
    };
  }
  const fix = installCommand(python);
  if (probe.exitCode !== 0) {
    const missing = /No module named '?tensor_dap'?/.test(probe.stderr);
    if (missing) {
      return {
        ok: false,
        problem: "not-installed",
        message: `tensor-dap is not installed in ${python} ${where(interpreter)}. Install it with: ${fix}`,
        fix,
      };
    }
    const last = probe.stderr.trim().split(/\r?\n/).pop() ?? "";
    return {
      ok: false,
      problem: "broken",
      message: `tensor-dap: importing tensor_dap in ${python} failed: ${last || `exit code ${String(probe.exitCode)}`}. Reinstall it with: ${fix}`,
      fix,
    };
  }
  const text = probe.stdout.trim().split(/\r?\n/).pop() ?? "";
  const version = parseVersion(text);
  const wanted = parseVersion(minimum) ?? [0];
  if (!version) {
    return {
      ok: false,
      problem: "too-old",
      message: `tensor-dap in ${python} does not report a version ("${text}"); this extension needs ${minimum} or newer. Upgrade it with: ${fix}`,
      fix,
    };
  }
  if (compareVersions(version, wanted) < 0) {
    return {
      ok: false,
      problem: "too-old",
      message: `tensor-dap ${text} in ${python} is older than ${minimum}, the oldest this extension works with. Upgrade it with: ${fix}`,
      fix,
    };
  }
  return { ok: true, version: text };
}
