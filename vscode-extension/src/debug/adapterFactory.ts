// Starts the debug adapter: `<python> -m tensor_dap adapter`, DAP over its stdin/stdout, with the
// interpreter of the configuration (filled in by configProvider.ts) or the folder's interpreter.

import * as vscode from "vscode";
import { DEBUG_TYPE } from "../common/constants";
import { logInfo } from "../common/log";
import { resolveInterpreter } from "../common/python";

export const ADAPTER_ARGS = ["-m", "tensor_dap", "adapter"];

export class TensorDapAdapterFactory implements vscode.DebugAdapterDescriptorFactory {
  async createDebugAdapterDescriptor(session: vscode.DebugSession): Promise<vscode.DebugAdapterDescriptor> {
    const configured = session.configuration.python;
    const python =
      typeof configured === "string" && configured
        ? configured
        : (await resolveInterpreter(session.workspaceFolder?.uri)).path;
    logInfo(`debug adapter: ${python} ${ADAPTER_ARGS.join(" ")}`);
    const cwd = session.workspaceFolder?.uri.fsPath;
    return new vscode.DebugAdapterExecutable(python, ADAPTER_ARGS, cwd ? { cwd } : undefined);
  }
}

export function registerAdapterFactory(context: vscode.ExtensionContext): void {
  context.subscriptions.push(
    vscode.debug.registerDebugAdapterDescriptorFactory(DEBUG_TYPE, new TensorDapAdapterFactory()),
  );
}
