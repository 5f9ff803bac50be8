// DebugConfigurationProvider for `tensor-dap`: F5 without launch.json debugs the current file;
// every configuration gets the interpreter and, when it has none, the tensor breakpoints from
// settings; a missing or too old tensor_dap stops the launch with one clear message (checked
// after variable substitution, so `"python": "${command:python.interpreterPath}"` works).

import * as vscode from "vscode";
import { DEBUG_TYPE } from "../common/constants";
import { checkTensorDap, resolveInterpreter } from "../common/python";
import { activeEditorInfo, getSettings } from "../common/vscodeapi";
import { currentFileConfiguration, resolveConfiguration } from "./resolve";

export class TensorDapConfigurationProvider implements vscode.DebugConfigurationProvider {
  provideDebugConfigurations(): vscode.DebugConfiguration[] {
    return [currentFileConfiguration()];
  }

  async resolveDebugConfiguration(
    folder: vscode.WorkspaceFolder | undefined,
    raw: vscode.DebugConfiguration,
  ): Promise<vscode.DebugConfiguration | undefined> {
    const editor = activeEditorInfo();
    const resource = folder?.uri ?? editor.uri;
    const interpreter = await resolveInterpreter(resource);
    const settings = getSettings(resource);
    const resolved = resolveConfiguration(raw, {
      activeLanguage: editor.language,
      activeFile: editor.file,
      python: interpreter.path,
      defaultRules: settings.defaultRules,
      tracePath: settings.tracePath,
    });
    if (!resolved.ok) {
      void vscode.window.showErrorMessage(resolved.message);
      return undefined; // cancels the launch
    }
    return resolved.config as vscode.DebugConfiguration;
  }

  /** After `${...}` substitution: is tensor_dap usable in the interpreter that will run? */
  async resolveDebugConfigurationWithSubstitutedVariables(
    folder: vscode.WorkspaceFolder | undefined,
    config: vscode.DebugConfiguration,
  ): Promise<vscode.DebugConfiguration | undefined> {
    const interpreter = await resolveInterpreter(folder?.uri ?? activeEditorInfo().uri);
    const python = typeof config.python === "string" && config.python ? config.python : interpreter.path;
    const check = await checkTensorDap(
      python === interpreter.path ? interpreter : { path: python, source: "configuration" },
    );
    return check.ok ? config : undefined; // checkTensorDap showed the one message
  }
}

export function registerConfigurationProvider(context: vscode.ExtensionContext): void {
  const provider = new TensorDapConfigurationProvider();
  context.subscriptions.push(
    vscode.debug.registerDebugConfigurationProvider(DEBUG_TYPE, provider),
    vscode.debug.registerDebugConfigurationProvider(
      DEBUG_TYPE,
      { provideDebugConfigurations: () => provider.provideDebugConfigurations() },
      vscode.DebugConfigurationProviderTriggerKind.Dynamic,
    ),
  );
}
