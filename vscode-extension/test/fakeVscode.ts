// A stand-in for the `vscode` module, enough to activate the extension in plain Node and drive
// its registrations (activation.test.ts). Members it does not define are dummy classes, so that
// vscode-languageclient's module-level `class X extends vscode.Y` still loads.

/* eslint-disable @typescript-eslint/no-explicit-any */
import Module from "module";
import * as path from "path";

export interface FakeState {
  settings: Record<string, unknown>;
  commands: Map<string, (...args: any[]) => any>;
  configProviders: { type: string; provider: any; trigger?: number }[];
  adapterFactories: Map<string, any>;
  trackerFactories: Map<string, any>;
  inlineValueProviders: { selector: any; provider: any }[];
  errors: string[];
  activeEditor?: { document: any };
  activeDebugSession?: any;
  treeProviders?: Map<string, any>;
}

/** A state with nothing registered yet (`settings` as given). */
export function newFakeState(settings: Record<string, unknown> = {}): FakeState {
  return {
    settings,
    commands: new Map(),
    configProviders: [],
    adapterFactories: new Map(),
    trackerFactories: new Map(),
    inlineValueProviders: [],
    errors: [],
  };
}

class Disposable {
  constructor(private readonly callback: () => void = () => undefined) {}
  dispose(): void {
    this.callback();
  }
}

class Uri {
  constructor(readonly fsPath: string, readonly scheme = "file") {}
  static file(p: string): Uri {
    return new Uri(p);
  }
  static joinPath(base: Uri, ...parts: string[]): Uri {
    return new Uri(path.join(base.fsPath, ...parts));
  }
  toString(): string {
    return `file://${this.fsPath}`;
  }
}

class Range {
  constructor(readonly startLine: number, readonly startCol: number, readonly endLine: number, readonly endCol: number) {}
  get start(): { line: number; character: number } {
    return { line: this.startLine, character: this.startCol };
  }
  get end(): { line: number; character: number } {
    return { line: this.endLine, character: this.endCol };
  }
}

class InlineValueVariableLookup {
  constructor(readonly range: Range, readonly variableName: string, readonly caseSensitiveLookup: boolean) {}
}

class InlineValueEvaluatableExpression {
  constructor(readonly range: Range, readonly expression: string) {}
}

class DebugAdapterExecutable {
  constructor(readonly command: string, readonly args: string[], readonly options?: { cwd?: string }) {}
}

class DebugStackFrame {}

class TreeItem {
  description?: string;
  tooltip?: string;
  contextValue?: string;
  command?: any;
  constructor(readonly label: string, readonly collapsibleState?: number) {}
}

class EventEmitter<T> {
  private listeners: ((value: T) => void)[] = [];
  readonly event = (listener: (value: T) => void): Disposable => {
    this.listeners.push(listener);
    return new Disposable(() => (this.listeners = this.listeners.filter((l) => l !== listener)));
  };
  fire(value: T): void {
    this.listeners.forEach((listener) => listener(value));
  }
  dispose(): void {
    this.listeners = [];
  }
}
class DebugThread {}

function event(): (listener: any) => Disposable {
  return () => new Disposable();
}

export function installFakeVscode(state: FakeState): any {
  const outputChannel = {
    info: () => undefined,
    warn: () => undefined,
    error: () => undefined,
    debug: () => undefined,
    trace: () => undefined,
    append: () => undefined,
    appendLine: () => undefined,
    replace: () => undefined,
    clear: () => undefined,
    show: () => undefined,
    hide: () => undefined,
    dispose: () => undefined,
    name: "tensor-dap",
    logLevel: 2,
    onDidChangeLogLevel: event(),
  };
  const api: any = {
    Disposable,
    Uri,
    Range,
    InlineValueVariableLookup,
    InlineValueEvaluatableExpression,
    DebugAdapterExecutable,
    DebugStackFrame,
    DebugThread,
    TreeItem,
    EventEmitter,
    TreeItemCollapsibleState: { None: 0, Collapsed: 1, Expanded: 2 },
    ViewColumn: { Beside: -2, One: 1 },
    DebugConfigurationProviderTriggerKind: { Initial: 1, Dynamic: 2 },
    window: {
      createOutputChannel: () => outputChannel,
      showErrorMessage: async (message: string) => {
        state.errors.push(message);
        return undefined;
      },
      get activeTextEditor() {
        return state.activeEditor;
      },
      registerTreeDataProvider: (id: string, provider: any) => {
        (state.treeProviders ??= new Map()).set(id, provider);
        return new Disposable(() => state.treeProviders?.delete(id));
      },
      createWebviewPanel: () => {
        throw new Error("no webviews here");
      },
    },
    workspace: {
      getConfiguration: () => ({ get: (key: string) => state.settings[key] }),
      getWorkspaceFolder: () => undefined,
      workspaceFolders: undefined,
      onDidChangeConfiguration: event(),
    },
    extensions: { getExtension: () => undefined },
    commands: {
      registerCommand: (name: string, handler: any) => {
        state.commands.set(name, handler);
        return new Disposable(() => state.commands.delete(name));
      },
      executeCommand: async () => undefined,
    },
    debug: {
      registerDebugConfigurationProvider: (type: string, provider: any, trigger?: number) => {
        state.configProviders.push({ type, provider, trigger });
        return new Disposable();
      },
      registerDebugAdapterDescriptorFactory: (type: string, factory: any) => {
        state.adapterFactories.set(type, factory);
        return new Disposable();
      },
      registerDebugAdapterTrackerFactory: (type: string, factory: any) => {
        state.trackerFactories.set(type, factory);
        return new Disposable();
      },
      onDidChangeActiveStackItem: event(),
      onDidTerminateDebugSession: event(),
      get activeDebugSession() {
        return state.activeDebugSession;
      },
      activeStackItem: undefined,
    },
    languages: {
      registerInlineValuesProvider: (selector: any, provider: any) => {
        state.inlineValueProviders.push({ selector, provider });
        return new Disposable();
      },
    },
    env: { clipboard: { writeText: async () => undefined } },
  };
  const fake = new Proxy(api, {
    get(target, key) {
      if (key in target || typeof key === "symbol") {
        return target[key];
      }
      // anything else: a class (extendable), whose instances/statics are harmless
      const Dummy = class {};
      target[key] = Dummy;
      return Dummy;
    },
  });
  const loader = Module as unknown as { _load: (request: string, ...rest: unknown[]) => unknown };
  const original = loader._load;
  loader._load = function (request: string, ...rest: unknown[]) {
    return request === "vscode" ? fake : original.call(this, request, ...rest);
  };
  return fake;
}
