// How View Tensor asks the debuggee for a picture: one DAP `evaluate` in the paused frame calling
// tensor_dap.render.picture.encode(<the variable's evaluateName>), with context "clipboard" and
// format {rawString: true} so that debugpy returns the JSON whole and unquoted (its other
// contexts cut values at a few hundred characters). Pure (unit-tested in Node).

export const PICTURE_MODULE = "tensor_dap.render.picture";

export function viewTensorExpression(evaluateName: string): string {
  return `__import__('${PICTURE_MODULE}', fromlist=['encode']).encode((${evaluateName}))`;
}

export interface EvaluateArguments {
  expression: string;
  frameId?: number;
  context: "clipboard";
  format: { rawString: true };
}

export function evaluateArguments(evaluateName: string, frameId: number | undefined): EvaluateArguments {
  return {
    expression: viewTensorExpression(evaluateName),
    ...(frameId !== undefined ? { frameId } : {}),
    context: "clipboard",
    format: { rawString: true },
  };
}

/** What the VARIABLES context menu passes to a command. */
export interface VariableTarget {
  name: string;
  evaluateName: string;
}

export function targetFromMenu(argument: unknown): VariableTarget | { error: string } {
  const variable = (argument as { variable?: { name?: unknown; evaluateName?: unknown } } | undefined)?.variable;
  if (!variable || typeof variable.name !== "string") {
    return { error: "View Tensor: right-click a tensor in the VARIABLES view." };
  }
  if (typeof variable.evaluateName !== "string" || !variable.evaluateName) {
    return { error: `View Tensor: "${variable.name}" has no expression the debugger can evaluate; pick the tensor itself.` };
  }
  return { name: variable.name, evaluateName: variable.evaluateName };
}

/** A failed evaluate, said in the user's terms. */
export function explainEvaluateError(message: string, evaluateName: string): string {
  if (/No module named '?tensor_dap/.test(message)) {
    return "View Tensor needs tensor-dap (0.1.0 or newer) in the Python that runs the program: pip install --upgrade tensor-dap";
  }
  if (/NameError/.test(message)) {
    return `${evaluateName} is not defined in the selected frame.`;
  }
  if (/not suspended|Unable to find thread|not paused/i.test(message)) {
    return "The program is running; View Tensor updates when it pauses.";
  }
  return message;
}
