// Starts the debug adapter: `<python> -m tensor_dap adapter`, DAP over its stdin/stdout, with the
// interpreter of the configuration (filled in by configProvider.ts) or the folder's interpreter.
// It tells the adapter the rules the configuration turns on (`--rules`, resolved: the launch's
// `tensorBreakpoints` or `tensorDap.defaultRules`): VS Code creates each rule's checkbox in
// BREAKPOINTS from the filter's `default`, which the adapter sets for those rules, so the view
// shows them ticked from the start; what the view then sends is what is on.

import * as vscode from "vscode";
import { DEBUG_TYPE } from "../common/constants";
import { logInfo } from "../common/log";
import { resolveInterpreter } from "../common/python";

export const ADAPTER_ARGS = ["-m", "tensor_dap", "adapter"];

/** The adapter's arguments for a configuration: `--rules` with its tensor breakpoints, if any
 * (and `memory-limit` when the launch sets `tensorMemoryLimit`, which turns it on).
 * Not for a subprocess's session (debugpy's `subProcessId`): its agent takes the rules of the
 * session that launched the program, and its configuration is not one the user wrote. */
export function adapterArgs(configuration: { [key: string]: unknown }): string[] {
  const rules = configuration.tensorBreakpoints;
  if (!Array.isArray(rules) || configuration.subProcessId !== undefined) {
    return ADAPTER_ARGS;
  }
  const ticked = rules.map(String);
  if (configuration.tensorMemoryLimit !== undefined && !ticked.includes("memory-limit")) {
    ticked.push("memory-limit");
  }
  return [...ADAPTER_ARGS, "--rules", ticked.join(",")];
}

export class TensorDapAdapterFactory implements vscode.DebugAdapterDescriptorFactory {
  async createDebugAdapterDescriptor(session: vscode.DebugSession): Promise<vscode.DebugAdapterDescriptor> {
    const configured = session.configuration.python;
    const python =
      typeof configured === "string" && configured
        ? configured
        : (await resolveInterpreter(session.workspaceFolder?.uri)).path;
    const args = adapterArgs(session.configuration);
    logInfo(`debug adapter: ${python} ${args.join(" ")}`);
    const cwd = session.workspaceFolder?.uri.fsPath;
    return new vscode.DebugAdapterExecutable(python, args, cwd ? { cwd } : undefined);
  }
}

export function registerAdapterFactory(context: vscode.ExtensionContext): void {
  context.subscriptions.push(
    vscode.debug.registerDebugAdapterDescriptorFactory(DEBUG_TYPE, new TensorDapAdapterFactory()),
  );
}
