// The "View Tensor" command and panels: right-click a tensor in VARIABLES (tensor-dap sessions),
// or run the command and type an expression -> a webview with a heatmap or RGB image and a
// histogram, fetched from the paused debuggee (fetch.ts) and redrawn whenever the session stops
// again or another frame is selected.

import { randomBytes } from "crypto";
import * as vscode from "vscode";
import { DEBUG_TYPE } from "../common/constants";
import { logDebug } from "../common/log";
import { evaluateArguments, explainEvaluateError, targetFromMenu, VariableTarget } from "./fetch";
import { panelHtml } from "./html";
import { parsePayload, PictureData } from "./picture";

type ToWebview =
  | { type: "picture"; title: string; data: PictureData }
  | { type: "error"; title: string; message: string }
  | { type: "status"; title: string; message: string };

function nonce(): string {
  return randomBytes(18).toString("base64").replace(/[+/=]/g, "x");
}

async function currentFrameId(session: vscode.DebugSession): Promise<number | undefined> {
  const item = vscode.debug.activeStackItem;
  if (item instanceof vscode.DebugStackFrame && item.session.id === session.id) {
    return item.frameId;
  }
  const threadId = item instanceof vscode.DebugThread && item.session.id === session.id ? item.threadId : undefined;
  return topFrameId(session, threadId);
}

async function topFrameId(session: vscode.DebugSession, threadId?: number): Promise<number | undefined> {
  try {
    let thread = threadId;
    if (thread === undefined) {
      const threads = await session.customRequest("threads");
      thread = threads?.threads?.[0]?.id;
    }
    if (thread === undefined) {
      return undefined;
    }
    const trace = await session.customRequest("stackTrace", { threadId: thread, startFrame: 0, levels: 1 });
    return trace?.stackFrames?.[0]?.id;
  } catch (error) {
    logDebug(`View Tensor: no frame: ${String(error)}`);
    return undefined;
  }
}

class TensorPanel {
  private last: ToWebview | undefined;
  private generation = 0;
  readonly disposed: Promise<void>;

  constructor(
    readonly panel: vscode.WebviewPanel,
    readonly session: vscode.DebugSession,
    readonly target: VariableTarget,
    extensionUri: vscode.Uri,
  ) {
    const webview = panel.webview;
    webview.options = { enableScripts: true, localResourceRoots: [vscode.Uri.joinPath(extensionUri, "dist")] };
    webview.html = html(webview, vscode.Uri.joinPath(extensionUri, "dist", "webview.js"));
    webview.onDidReceiveMessage((message: { type?: string }) => {
      if (message?.type === "ready" && this.last) {
        void webview.postMessage(this.last);
      }
    });
    this.disposed = new Promise((resolve) => panel.onDidDispose(() => resolve()));
  }

  get title(): string {
    return this.target.evaluateName;
  }

  post(message: ToWebview): void {
    this.last = message;
    void this.panel.webview.postMessage(message);
  }

  /** Fetch and draw, in frame `frameId` (else the session's current frame). */
  async refresh(frameId?: number): Promise<void> {
    const generation = ++this.generation;
    const frame = frameId ?? (await currentFrameId(this.session));
    try {
      const started = Date.now();
      const body = await this.session.customRequest("evaluate", evaluateArguments(this.target.evaluateName, frame));
      const data = parsePayload(String(body?.result ?? ""));
      logDebug(`View Tensor ${this.title}: ${String(body?.result?.length)} chars in ${Date.now() - started} ms`);
      if (generation === this.generation) {
        this.post({ type: "picture", title: this.title, data });
      }
    } catch (error) {
      const message = explainEvaluateError(error instanceof Error ? error.message : String(error), this.title);
      if (generation === this.generation) {
        this.post({ type: "error", title: this.title, message });
      }
    }
  }

  status(message: string): void {
    this.generation++;
    void this.panel.webview.postMessage({ type: "status", title: this.title, message });
  }
}

function html(webview: vscode.Webview, script: vscode.Uri): string {
  return panelHtml(webview.cspSource, webview.asWebviewUri(script).toString(), nonce());
}

export function registerTensorView(context: vscode.ExtensionContext): void {
  const panels = new Set<TensorPanel>();
  const forSession = (session: vscode.DebugSession): TensorPanel[] => [...panels].filter((p) => p.session.id === session.id);
  const pendingStops = new Map<string, NodeJS.Timeout>();

  const open = async (argument: unknown): Promise<void> => {
    let target = targetFromMenu(argument);
    if ("error" in target && argument === undefined) {
      // from the command palette: ask for an expression
      const expression = await vscode.window.showInputBox({
        title: "View Tensor",
        prompt: "A tensor expression, evaluated in the selected frame",
        placeHolder: "model.fc.weight",
      });
      if (!expression?.trim()) {
        return;
      }
      target = { name: expression.trim(), evaluateName: expression.trim() };
    }
    if ("error" in target) {
      void vscode.window.showErrorMessage(target.error);
      return;
    }
    const session = vscode.debug.activeDebugSession;
    if (!session || session.type !== DEBUG_TYPE) {
      void vscode.window.showErrorMessage("View Tensor: pause a tensor-dap debug session first.");
      return;
    }
    const existing = [...panels].find((p) => p.session.id === session.id && p.target.evaluateName === target.evaluateName);
    if (existing) {
      existing.panel.reveal(undefined, true);
      await existing.refresh();
      return;
    }
    const webviewPanel = vscode.window.createWebviewPanel(
      "tensorDap.viewTensor",
      `Tensor: ${target.evaluateName}`,
      { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
      { enableScripts: true, localResourceRoots: [vscode.Uri.joinPath(context.extensionUri, "dist")] },
    );
    const panel = new TensorPanel(webviewPanel, session, target, context.extensionUri);
    panels.add(panel);
    void panel.disposed.then(() => panels.delete(panel));
    panel.post({ type: "status", title: panel.title, message: "fetching…" });
    await panel.refresh();
  };

  const refreshAfterStop = (session: vscode.DebugSession, threadId?: number): void => {
    clearTimeout(pendingStops.get(session.id));
    // VS Code focuses the new top frame right after a stop; when it does, the active stack item
    // handler refreshes and cancels this fallback
    pendingStops.set(
      session.id,
      setTimeout(() => {
        pendingStops.delete(session.id);
        void topFrameId(session, threadId).then((frame) => forSession(session).forEach((p) => void p.refresh(frame)));
      }, 400),
    );
  };

  context.subscriptions.push(
    vscode.commands.registerCommand("tensorDap.viewTensor", open),
    vscode.debug.onDidChangeActiveStackItem((item) => {
      if (item instanceof vscode.DebugStackFrame) {
        clearTimeout(pendingStops.get(item.session.id));
        pendingStops.delete(item.session.id);
        forSession(item.session).forEach((p) => void p.refresh(item.frameId));
      }
    }),
    vscode.debug.registerDebugAdapterTrackerFactory(DEBUG_TYPE, {
      createDebugAdapterTracker(session) {
        return {
          onDidSendMessage(message: { type?: string; event?: string; body?: { threadId?: number } }) {
            if (message.type !== "event" || forSession(session).length === 0) {
              return;
            }
            if (message.event === "stopped") {
              refreshAfterStop(session, message.body?.threadId);
            } else if (message.event === "continued") {
              forSession(session).forEach((p) => p.status("running… (updates when the program pauses)"));
            }
          },
        };
      },
    }),
    vscode.debug.onDidTerminateDebugSession((session) => {
      clearTimeout(pendingStops.get(session.id));
      forSession(session).forEach((p) => p.status("the debug session ended; this is the last picture"));
    }),
    { dispose: () => panels.forEach((p) => p.panel.dispose()) },
  );
}
