// The few VS Code calls the rest of the extension makes, in one place, so that modules with logic
// take plain values and stay unit-testable.

import * as vscode from "vscode";
import { CONFIG_SECTION } from "./constants";
import { readSettings, Settings } from "./settings";

export function getSettings(resource?: vscode.Uri): Settings {
  const config = vscode.workspace.getConfiguration(CONFIG_SECTION, resource);
  return readSettings((key) => config.get(key));
}

export function workspaceFolderFor(resource?: vscode.Uri): vscode.WorkspaceFolder | undefined {
  if (resource) {
    const folder = vscode.workspace.getWorkspaceFolder(resource);
    if (folder) {
      return folder;
    }
  }
  return vscode.workspace.workspaceFolders?.[0];
}

export function activeEditorInfo(): { language?: string; file?: string; uri?: vscode.Uri } {
  const editor = vscode.window.activeTextEditor;
  if (!editor) {
    return {};
  }
  return {
    language: editor.document.languageId,
    file: editor.document.uri.scheme === "file" ? editor.document.uri.fsPath : undefined,
    uri: editor.document.uri,
  };
}

export function onSettingsChanged(
  listener: (changed: (key: string) => boolean) => void,
): vscode.Disposable {
  return vscode.workspace.onDidChangeConfiguration((event) => {
    if (event.affectsConfiguration(CONFIG_SECTION)) {
      listener((key) => event.affectsConfiguration(`${CONFIG_SECTION}.${key}`));
    }
  });
}
