// The `tensorDap.*` settings, read through a getter so that the defaults and coercions are
// unit-tested without VS Code (vscodeapi.ts supplies the real getter).

export type HintStyle = "full" | "shape";

export interface Settings {
  /** `tensorDap.python`: an interpreter path, empty for "choose one". */
  python: string;
  /** `tensorDap.defaultRules`: tensor breakpoints of a configuration without any. */
  defaultRules: string[];
  hintsEnabled: boolean;
  hintsStyle: HintStyle;
  /** `tensorDap.trace.path`: the trace store the language server reads; empty for its default. */
  tracePath: string;
  languageServerEnabled: boolean;
}

/** Reads one key under `tensorDap.`; undefined when unset. */
export type SettingGetter = (key: string) => unknown;

export function readSettings(get: SettingGetter): Settings {
  const rules = get("defaultRules");
  const style = get("hints.style");
  return {
    python: typeof get("python") === "string" ? (get("python") as string) : "",
    defaultRules: Array.isArray(rules) ? rules.map(String) : ["default"],
    hintsEnabled: get("hints.enabled") !== false,
    hintsStyle: style === "shape" ? "shape" : "full",
    tracePath: typeof get("trace.path") === "string" ? (get("trace.path") as string) : "",
    languageServerEnabled: get("languageServer.enabled") !== false,
  };
}

/** The settings the language server is told about (`initializationOptions`). */
export function serverOptions(settings: Settings): { hints: { enabled: boolean; style: HintStyle } } {
  return { hints: { enabled: settings.hintsEnabled, style: settings.hintsStyle } };
}
