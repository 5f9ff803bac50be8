// Finds the names assigned on the lines of a Python function up to the line the debugger stopped
// on, for VS Code's inline values (inlineValues.ts turns them into variable lookups). A line scan,
// not a parser: good enough for `x = ...`, `a, b = ...`, `x: T = ...`, `x += ...`, `for i, x in`,
// `with f() as x`, `def f(a, b)` parameters. Pure (unit-tested in Node).

export interface AssignedName {
  /** 0-based line and the name's columns on it. */
  line: number;
  start: number;
  end: number;
  name: string;
}

const KEYWORDS = new Set([
  "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
  "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in",
  "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
]);
const AUGMENTED = ["+=", "-=", "*=", "/=", "//=", "%=", "**=", "@=", "&=", "|=", "^=", ">>=", "<<="];

/** The line's code without a trailing comment (string-aware enough for `#` in quotes). */
export function stripComment(text: string): string {
  let quote: string | undefined;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quote) {
      if (c === "\\") {
        i++;
      } else if (c === quote) {
        quote = undefined;
      }
    } else if (c === '"' || c === "'") {
      quote = c;
    } else if (c === "#") {
      return text.slice(0, i);
    }
  }
  return text;
}

function indentOf(text: string): number {
  return text.length - text.trimStart().length;
}

/** The 0-based line of the `def` enclosing `line`, or 0 when it is module code. */
export function functionStart(lines: string[], line: number): number {
  let indent = line < lines.length ? indentOf(lines[line]) : 0;
  for (let i = line - 1; i >= 0; i--) {
    const text = lines[i];
    if (!text.trim() || text.trimStart().startsWith("#")) {
      continue;
    }
    const own = indentOf(text);
    if (own < indent) {
      if (/^\s*(async\s+)?def\s/.test(text)) {
        return i;
      }
      if (/^\s*class\s/.test(text)) {
        return i + 1;
      }
      indent = own;
    }
  }
  return 0;
}

/** Identifiers (dotted names allowed) in a comma list like `a, (b, c), self.d` with columns. */
function namesIn(text: string, offset: number, out: AssignedName[], line: number): void {
  const re = /[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(\s*\[)?/g;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    const name = m[0].replace(/\s*\[$/, "");
    if (m[1] || KEYWORDS.has(name)) {
      continue; // `x[i] = ...` assigns an element, not x; keywords are not names
    }
    out.push({ line, start: offset + m.index, end: offset + m.index + name.length, name });
  }
}

/** The assignment target text of one line, with its start column, or undefined. */
function targetsOf(code: string): { text: string; start: number } | undefined {
  const trimmed = code.trimStart();
  const lead = code.length - trimmed.length;
  let m = /^(?:async\s+)?for\s+(.+?)\s+in\s/.exec(trimmed);
  if (m) {
    return { text: m[1], start: lead + trimmed.indexOf(m[1]) };
  }
  m = /\bas\s+([A-Za-z_][\w.]*)\s*:?\s*$/.exec(trimmed);
  if (m && /^(?:async\s+)?with\s/.test(trimmed)) {
    return { text: m[1], start: lead + m.index + m[0].indexOf(m[1]) };
  }
  // plain / annotated / augmented assignment: the text before the first top-level `=`
  let depth = 0;
  let quote: string | undefined;
  for (let i = 0; i < trimmed.length; i++) {
    const c = trimmed[i];
    if (quote) {
      if (c === "\\") {
        i++;
      } else if (c === quote) {
        quote = undefined;
      }
      continue;
    }
    if (c === '"' || c === "'") {
      quote = c;
    } else if ("([{".includes(c)) {
      depth++;
    } else if (")]}".includes(c)) {
      depth--;
    } else if (c === "=" && depth === 0) {
      const next = trimmed[i + 1];
      const prev = trimmed[i - 1];
      if (next === "=" || prev === "=" || prev === "!" || prev === "<" || prev === ">") {
        if (next === "=") {
          i++;
        }
        // `==`, `!=`, `<=`, `>=` (but `>>=` / `<<=` are augmented)
        if (!(trimmed.slice(i - 2, i + 1) === ">>=" || trimmed.slice(i - 2, i + 1) === "<<=")) {
          continue;
        }
      }
      let head = trimmed.slice(0, i);
      for (const op of AUGMENTED) {
        if ((head + "=").endsWith(op)) {
          head = head.slice(0, head.length - op.length + 1);
          break;
        }
      }
      const colon = head.indexOf(":");
      if (colon >= 0) {
        head = head.slice(0, colon); // `x: Tensor = ...`
      }
      if (/^(?:if|elif|while|return|assert|lambda|print|yield)\b/.test(head) || /[\w\])]\s*\(/.test(head)) {
        return undefined; // a comparison, or a call's result: not a name in the frame
      }
      return { text: head, start: lead };
    }
  }
  return undefined;
}

/**
 * Names assigned on lines `from`..`to` (0-based, inclusive), in order, each name once at its last
 * assignment. `def` parameters on the first line count too.
 */
export function assignedNames(lines: string[], from: number, to: number): AssignedName[] {
  const found: AssignedName[] = [];
  for (let line = Math.max(0, from); line <= Math.min(to, lines.length - 1); line++) {
    const code = stripComment(lines[line]);
    const def = /^\s*(?:async\s+)?def\s+\w+\s*\((.*)/.exec(code);
    if (def) {
      const params = def[1].split(")")[0];
      const offset = code.indexOf(def[1]);
      const cleaned = params.replace(/(:[^,=]*|=[^,]*)/g, (s) => " ".repeat(s.length));
      namesIn(cleaned, offset, found, line);
      continue;
    }
    const target = targetsOf(code);
    if (target) {
      namesIn(target.text, target.start, found, line);
    }
  }
  const last = new Map<string, AssignedName>();
  for (const name of found) {
    last.delete(name.name);
    last.set(name.name, name);
  }
  return [...last.values()].filter((n) => n.name !== "self" && n.name !== "cls").sort((a, b) => a.line - b.line || a.start - b.start);
}

/** What to show inline while stopped on `stoppedLine`, within the visible lines. */
export function inlineNames(lines: string[], stoppedLine: number, visibleFrom: number, visibleTo: number): AssignedName[] {
  const from = Math.max(functionStart(lines, stoppedLine), visibleFrom);
  return assignedNames(lines, from, Math.min(stoppedLine, visibleTo));
}
