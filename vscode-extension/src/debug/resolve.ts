// Fills in a tensor-dap debug configuration before it starts (F5 with no launch.json, the
// interpreter, the tensor breakpoints from settings) and says what is wrong with a bad one.
// Pure: no `vscode` import; the provider in configProvider.ts passes in what it read.

import { DEBUG_TYPE, RULE_GROUPS, RULE_IDS } from "../common/constants";
import type { TensorDapConfiguration } from "./types";

export interface ResolveContext {
  /** The active editor's language id and file path, if any. */
  activeLanguage?: string;
  activeFile?: string;
  /** The interpreter chosen for this folder (settings, Python extension, python3). */
  python: string;
  /** `tensorDap.defaultRules`. */
  defaultRules: string[];
  /** `tensorDap.trace.path`: where the run writes its trace store (empty: its default). */
  tracePath?: string;
}

export type Resolved =
  | { ok: true; config: TensorDapConfiguration }
  | { ok: false; message: string };

const KNOWN_RULES = new Set<string>([...RULE_IDS, ...RULE_GROUPS]);

/** The configuration F5 uses when there is no launch.json: debug the current file. */
export function currentFileConfiguration(): TensorDapConfiguration {
  return {
    type: DEBUG_TYPE,
    request: "launch",
    name: "tensor-dap: current file",
    program: "${file}",
    console: "integratedTerminal",
    justMyCode: true,
  };
}

function isEmpty(config: Record<string, unknown>): boolean {
  return !config.type && !config.request && !config.name;
}

export function resolveConfiguration(
  raw: Record<string, unknown>,
  context: ResolveContext,
): Resolved {
  let config: Record<string, unknown> = { ...raw };
  if (isEmpty(config)) {
    if (context.activeLanguage !== "python") {
      return {
        ok: false,
        message:
          "tensor-dap: open a Python file to debug it, or add a tensor-dap configuration to launch.json.",
      };
    }
    config = { ...currentFileConfiguration() };
  }
  config.type = config.type || DEBUG_TYPE;
  config.request = config.request || "launch";
  config.name = config.name || `tensor-dap: ${config.request}`;

  if (config.request === "launch") {
    if (!config.program && !config.module) {
      return {
        ok: false,
        message: `tensor-dap: the configuration "${String(config.name)}" needs "program" or "module".`,
      };
    }
    if (!config.python) {
      config.python = context.python;
    }
    const env = (config.env ?? {}) as Record<string, string | null>;
    if (context.tracePath && env.TENSOR_DAP_TRACE === undefined) {
      // the run writes the store the language server reads
      config.env = { ...env, TENSOR_DAP_TRACE: context.tracePath };
    }
  } else if (config.request === "attach") {
    const connect = config.connect as { port?: unknown } | undefined;
    if (!connect || typeof connect !== "object" || connect.port === undefined) {
      return {
        ok: false,
        message: `tensor-dap: the attach configuration "${String(config.name)}" needs "connect": {"host": "127.0.0.1", "port": 5678}.`,
      };
    }
  } else {
    return {
      ok: false,
      message: `tensor-dap: "request" must be "launch" or "attach", not "${String(config.request)}".`,
    };
  }

  if (config.tensorBreakpoints === undefined) {
    config.tensorBreakpoints = [...context.defaultRules];
  }
  const rules = config.tensorBreakpoints;
  if (!Array.isArray(rules)) {
    return { ok: false, message: 'tensor-dap: "tensorBreakpoints" must be a list of rule ids.' };
  }
  const unknown = rules.filter((rule) => !KNOWN_RULES.has(String(rule)));
  if (unknown.length > 0) {
    return {
      ok: false,
      message: `tensor-dap: unknown tensor breakpoint ${unknown.map((r) => `"${String(r)}"`).join(", ")}; known: ${[...RULE_GROUPS, ...RULE_IDS].join(", ")}.`,
    };
  }
  return { ok: true, config: config as TensorDapConfiguration };
}
