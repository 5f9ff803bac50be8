// Wiring only: the output channel, the `tensor-dap` debugger (configurations, adapter, inline
// values), the language server, the View Tensor panel, the Tensor Memory view and the commands.
// Everything disposable goes into context.subscriptions.

import * as vscode from "vscode";
import { createLog, logInfo } from "./common/log";
import { forgetChecks, onDidChangePythonInterpreter } from "./common/python";
import { onSettingsChanged } from "./common/vscodeapi";
import { registerAdapterFactory } from "./debug/adapterFactory";
import { registerConfigurationProvider } from "./debug/configProvider";
import { registerInlineValues } from "./debug/inlineValues";
import { LanguageServer } from "./lsp/client";
import { registerMemoryView } from "./views/memoryView";
import { registerTensorView } from "./views/tensorView";

let server: LanguageServer | undefined;

export function activate(context: vscode.ExtensionContext): void {
  const log = createLog();
  context.subscriptions.push(log);
  logInfo(`tensor-dap ${String(context.extension.packageJSON.version)} activated`);

  registerConfigurationProvider(context);
  registerAdapterFactory(context);
  registerInlineValues(context);
  registerTensorView(context);
  registerMemoryView(context);

  server = new LanguageServer();
  context.subscriptions.push(
    server,
    vscode.commands.registerCommand("tensorDap.restartLanguageServer", () => {
      forgetChecks();
      return server?.restart();
    }),
    vscode.commands.registerCommand("tensorDap.showOutput", () => log.show()),
    onSettingsChanged((changed) => {
      if (changed("python")) {
        forgetChecks();
      }
      if (["python", "trace.path", "languageServer.enabled", "hints.enabled", "hints.style"].some(changed)) {
        server?.restartSoon();
      }
    }),
  );
  server.restartSoon();
  // not awaited: activating the Python extension must not hold up ours
  void onDidChangePythonInterpreter(() => {
    forgetChecks();
    server?.restartSoon();
  }).then((listener) => listener && context.subscriptions.push(listener));
}

export async function deactivate(): Promise<void> {
  await server?.stopNow();
}
