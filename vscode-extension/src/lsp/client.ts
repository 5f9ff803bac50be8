// The language server: `<python> -m tensor_dap lsp` over stdio through vscode-languageclient,
// for Python files. Its stderr goes to the "tensor-dap" output channel. Restarts (command,
// settings or interpreter changes) are debounced; the settings travel as initializationOptions
// and the hint settings are also applied client-side in the middleware.

import * as os from "os";
import * as vscode from "vscode";
import { LanguageClient, LanguageClientOptions, ServerOptions } from "vscode-languageclient/node";
import { DEBUG_TYPE } from "../common/constants";
import { expandPath } from "../common/interpreter";
import { logError, logInfo, log } from "../common/log";
import { checkTensorDap, resolveInterpreter } from "../common/python";
import { serverOptions } from "../common/settings";
import { getSettings, workspaceFolderFor } from "../common/vscodeapi";
import { styleHintLabel } from "./hints";

export const LSP_ARGS = ["-m", "tensor_dap", "lsp"];
const RESTART_DELAY_MS = 500;

export class LanguageServer implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private timer: NodeJS.Timeout | undefined;
  private queue: Promise<void> = Promise.resolve();

  /** Start (or restart) after a short quiet period: several triggers make one restart. */
  restartSoon(): void {
    if (this.timer) {
      clearTimeout(this.timer);
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.restart();
    }, RESTART_DELAY_MS);
  }

  restart(): Promise<void> {
    this.queue = this.queue.then(() => this.stop()).then(() => this.start()).catch((error) => {
      logError(`language server: ${String(error)}`);
    });
    return this.queue;
  }

  private async start(): Promise<void> {
    const folder = workspaceFolderFor();
    const settings = getSettings(folder?.uri);
    if (!settings.languageServerEnabled) {
      logInfo("language server disabled (tensorDap.languageServer.enabled)");
      return;
    }
    const interpreter = await resolveInterpreter(folder?.uri);
    const check = await checkTensorDap(interpreter);
    if (!check.ok) {
      return;
    }
    const env: NodeJS.ProcessEnv = { ...process.env, PYTHONUNBUFFERED: "1" };
    if (settings.tracePath) {
      env.TENSOR_DAP_TRACE = expandPath(settings.tracePath, { workspaceFolder: folder?.uri.fsPath, home: os.homedir(), env: process.env });
    }
    const server: ServerOptions = {
      command: interpreter.path,
      args: LSP_ARGS, // no `transport`: TransportKind.stdio would append `--stdio` to the args
      options: { cwd: folder?.uri.fsPath, env },
    };
    const client: LanguageClientOptions = {
      documentSelector: [{ scheme: "file", language: "python" }],
      outputChannel: log(),
      initializationOptions: serverOptions(settings),
      middleware: {
        // While a tensor-dap session is paused, debug/inlineValues.ts shows the live values; the
        // server's (what the last run saw, same text as the inlay hints) would repeat them.
        provideInlineValues: (document, viewPort, context, token, next) =>
          vscode.debug.activeDebugSession?.type === DEBUG_TYPE ? [] : next(document, viewPort, context, token),
        provideInlayHints: async (document, range, token, next) => {
          const current = getSettings(document.uri);
          if (!current.hintsEnabled) {
            return [];
          }
          const hints = await next(document, range, token);
          if (!hints || current.hintsStyle === "full") {
            return hints;
          }
          for (const hint of hints) {
            if (typeof hint.label === "string") {
              hint.label = styleHintLabel(hint.label, current.hintsStyle);
            }
          }
          return hints;
        },
      },
    };
    this.client = new LanguageClient("tensorDap", "tensor-dap language server", server, client);
    logInfo(`language server: ${interpreter.path} ${LSP_ARGS.join(" ")}`);
    await this.client.start();
  }

  /** Stop now (extension deactivation). */
  stopNow(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    return this.stop();
  }

  private async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client) {
      try {
        await client.stop(2000);
      } catch (error) {
        logError(`language server stop: ${String(error)}`);
      }
    }
  }

  dispose(): void {
    if (this.timer) {
      clearTimeout(this.timer);
    }
    void this.stop();
  }
}
