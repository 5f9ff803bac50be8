// The "Tensor Memory" view in the Run and Debug side bar: while a tensor-dap session is paused,
// live tensor memory per device -> per creation line (file:line op, bytes, count) -> who holds
// it. Fetched with the adapter's `tensorMemory` request (memoryData.ts) only when the view is
// shown, again on each stop or frame change; clicking a line opens it.

import * as vscode from "vscode";
import { DEBUG_TYPE } from "../common/constants";
import { logDebug } from "../common/log";
import {
  deviceText,
  explainMemoryError,
  holderText,
  lineText,
  MEMORY_REQUEST,
  MemoryDevice,
  MemoryHolder,
  MemoryLine,
  memoryRequestArguments,
  parseSnapshot,
  RowText,
} from "./memoryData";

export const MEMORY_VIEW_ID = "tensorDap.memory";

export type MemoryNode =
  | { type: "message"; text: string }
  | { type: "device"; device: MemoryDevice }
  | { type: "line"; line: MemoryLine }
  | { type: "holder"; holder: MemoryHolder };

const NOT_PAUSED = "Pause a tensor-dap debug session to see its live tensor memory.";

export class MemoryTreeProvider implements vscode.TreeDataProvider<MemoryNode> {
  private readonly changed = new vscode.EventEmitter<MemoryNode | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private session: vscode.DebugSession | undefined;
  private frameId: number | undefined;
  private message = NOT_PAUSED;
  private roots: Promise<MemoryNode[]> | undefined;

  /** The program paused (or another frame was selected): fetch again when shown. */
  paused(session: vscode.DebugSession, frameId?: number): void {
    this.session = session;
    this.frameId = frameId;
    this.roots = undefined;
    this.changed.fire(undefined);
  }

  /** The program runs again, or its session ended. */
  idle(session: vscode.DebugSession, message: string): void {
    if (this.session !== undefined && this.session.id !== session.id) {
      return;
    }
    this.session = undefined;
    this.message = message;
    this.roots = undefined;
    this.changed.fire(undefined);
  }

  getTreeItem(node: MemoryNode): vscode.TreeItem {
    const collapsed = vscode.TreeItemCollapsibleState;
    switch (node.type) {
      case "message":
        return new vscode.TreeItem(node.text, collapsed.None);
      case "device":
        return item(deviceText(node.device), collapsed.Expanded, "device");
      case "holder":
        return item(holderText(node.holder), collapsed.None, `holder-${node.holder.kind}`);
      case "line": {
        const row = node.line;
        const tree = item(lineText(row), row.holders.length ? collapsed.Collapsed : collapsed.None, "line");
        if (row.path && row.line) {
          const at = new vscode.Range(row.line - 1, 0, row.line - 1, 0);
          tree.command = { command: "vscode.open", title: "Open the line", arguments: [vscode.Uri.file(row.path), { selection: at }] };
        }
        return tree;
      }
    }
  }

  getChildren(node?: MemoryNode): MemoryNode[] | Promise<MemoryNode[]> {
    if (node === undefined) {
      if (this.session === undefined) {
        return [{ type: "message", text: this.message }];
      }
      this.roots ??= this.fetch(this.session, this.frameId);
      return this.roots;
    }
    if (node.type === "device") {
      return node.device.lines.map((line) => ({ type: "line", line }));
    }
    if (node.type === "line") {
      return node.line.holders.map((holder) => ({ type: "holder", holder }));
    }
    return [];
  }

  private async fetch(session: vscode.DebugSession, frameId: number | undefined): Promise<MemoryNode[]> {
    try {
      const snapshot = parseSnapshot(await session.customRequest(MEMORY_REQUEST, memoryRequestArguments(frameId)));
      if (snapshot.devices.length === 0) {
        return [{ type: "message", text: "No live tensors." }];
      }
      return snapshot.devices.map((device) => ({ type: "device", device }));
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      logDebug(`Tensor Memory: ${message}`);
      return [{ type: "message", text: explainMemoryError(message) }];
    }
  }
}

function item(text: RowText, state: vscode.TreeItemCollapsibleState, contextValue: string): vscode.TreeItem {
  const tree = new vscode.TreeItem(text.label, state);
  tree.description = text.description;
  tree.tooltip = text.tooltip;
  tree.contextValue = contextValue;
  return tree;
}

export function registerMemoryView(context: vscode.ExtensionContext): MemoryTreeProvider {
  const provider = new MemoryTreeProvider();
  const fallbacks = new Map<string, NodeJS.Timeout>();
  const cancel = (session: vscode.DebugSession): void => {
    clearTimeout(fallbacks.get(session.id));
    fallbacks.delete(session.id);
  };
  context.subscriptions.push(
    vscode.window.registerTreeDataProvider(MEMORY_VIEW_ID, provider),
    vscode.debug.onDidChangeActiveStackItem((focused) => {
      if (focused instanceof vscode.DebugStackFrame && focused.session.type === DEBUG_TYPE) {
        cancel(focused.session);
        provider.paused(focused.session, focused.frameId);
      }
    }),
    vscode.debug.registerDebugAdapterTrackerFactory(DEBUG_TYPE, {
      createDebugAdapterTracker(session) {
        return {
          onDidSendMessage(message: { type?: string; event?: string }) {
            if (message.type !== "event") {
              return;
            }
            if (message.event === "stopped") {
              // VS Code focuses the new top frame right after a stop (handled above); if it
              // does not, the adapter answers from the top of the last stack trace
              cancel(session);
              fallbacks.set(
                session.id,
                setTimeout(() => provider.paused(session), 600),
              );
            } else if (message.event === "continued") {
              cancel(session);
              provider.idle(session, "Running… (updates when the program pauses)");
            }
          },
        };
      },
    }),
    vscode.debug.onDidTerminateDebugSession((session) => {
      cancel(session);
      provider.idle(session, NOT_PAUSED);
    }),
  );
  return provider;
}
