import * as vscode from "vscode";
export function registerTensorView(context: vscode.ExtensionContext): void {
  context.subscriptions.push(vscode.commands.registerCommand("tensorDap.viewTensor", () => undefined));
}
