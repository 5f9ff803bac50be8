// InlineValuesProvider for Python while a tensor-dap session is paused: a variable lookup for
// each name assigned in the stopped function up to the stopped line, within the visible range.
// VS Code then shows the adapter's values (`tensor<(4, 1) float32 cpu grad>`) at the line ends.

import * as vscode from "vscode";
import { DEBUG_TYPE } from "../common/constants";
import { inlineNames } from "./inlineScan";

export class TensorInlineValues implements vscode.InlineValuesProvider {
  provideInlineValues(
    document: vscode.TextDocument,
    viewPort: vscode.Range,
    context: vscode.InlineValueContext,
  ): vscode.InlineValue[] | undefined {
    if (vscode.debug.activeDebugSession?.type !== DEBUG_TYPE) {
      return undefined;
    }
    const stopped = context.stoppedLocation.end.line;
    const last = Math.min(stopped, viewPort.end.line, document.lineCount - 1);
    const lines: string[] = [];
    for (let i = 0; i <= last; i++) {
      lines.push(document.lineAt(i).text);
    }
    return inlineNames(lines, stopped, viewPort.start.line, last).map((found) => {
      const range = new vscode.Range(found.line, found.start, found.line, found.end);
      return found.name.includes(".")
        ? new vscode.InlineValueEvaluatableExpression(range, found.name)
        : new vscode.InlineValueVariableLookup(range, found.name, true);
    });
  }
}

export function registerInlineValues(context: vscode.ExtensionContext): void {
  context.subscriptions.push(
    vscode.languages.registerInlineValuesProvider({ language: "python" }, new TensorInlineValues()),
  );
}
