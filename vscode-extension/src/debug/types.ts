// The launch.json schema of the `tensor-dap` debug type, mirroring `contributes.debuggers[0]
// .configurationAttributes` in package.json. No `vscode` import (unit-tested in Node).

import type { RuleId } from "../common/constants";

export type TensorBreakpoint = RuleId | "default" | "all";

interface CommonAttributes {
  type: string;
  request: "launch" | "attach";
  name: string;
  /** Step and stop only in user code. */
  justMyCode?: boolean;
  /** Rules that stop the debugger; default: the `tensorDap.defaultRules` setting. */
  tensorBreakpoints?: TensorBreakpoint[];
  /** Ranks (torchrun `RANK`) where tensor breakpoints stop; absent: every rank. */
  tensorRanks?: number[];
  [key: string]: unknown;
}

export interface LaunchAttributes extends CommonAttributes {
  request: "launch";
  /** The script to run (one of program / module). */
  program?: string;
  /** `python -m MODULE` (one of program / module). */
  module?: string;
  /** The program's arguments: an array, or one string the adapter splits as a POSIX shell would. */
  args?: string[] | string;
  cwd?: string;
  env?: Record<string, string | null>;
  /** The interpreter that runs the program. */
  python?: string;
  console?: "internalConsole" | "integratedTerminal" | "externalTerminal";
  stopOnEntry?: boolean;
  subProcess?: boolean;
  /** Run on the CPU as if this device were present (`cuda:0`): device bugs without a GPU. */
  simulate?: "cuda";
  /** Stop where live tensor memory on a device passes this size (`6GiB`): turns on `memory-limit`. */
  tensorMemoryLimit?: string;
}

export interface AttachAttributes extends CommonAttributes {
  request: "attach";
  /** Where `tensor-dap run --listen HOST:PORT` listens. */
  connect: { host?: string; port: number };
}

export type TensorDapConfiguration = LaunchAttributes | AttachAttributes;

/** Every launch attribute the schema declares (package.json), checked against the interface. */
export const LAUNCH_ATTRIBUTES = [
  "program",
  "module",
  "args",
  "cwd",
  "env",
  "python",
  "justMyCode",
  "console",
  "stopOnEntry",
  "subProcess",
  "tensorBreakpoints",
  "tensorRanks",
  "simulate",
  "tensorMemoryLimit",
] as const satisfies readonly (keyof LaunchAttributes)[];

/** Every attach attribute the schema declares. */
export const ATTACH_ATTRIBUTES = ["connect", "justMyCode", "tensorBreakpoints", "tensorRanks"] as const satisfies readonly (keyof AttachAttributes)[];
