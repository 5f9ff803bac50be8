// The "tensor-dap" output channel: the extension's log and the language server's stderr. A
// LogOutputChannel, so it follows VS Code's log level ("Developer: Set Log Level").

import * as vscode from "vscode";

let channel: vscode.LogOutputChannel | undefined;

export function createLog(): vscode.LogOutputChannel {
  channel = vscode.window.createOutputChannel("tensor-dap", { log: true });
  return channel;
}

export function log(): vscode.LogOutputChannel | undefined {
  return channel;
}

export const logInfo = (message: string): void => channel?.info(message);
export const logWarn = (message: string): void => channel?.warn(message);
export const logError = (message: string): void => channel?.error(message);
export const logDebug = (message: string): void => channel?.debug(message);
