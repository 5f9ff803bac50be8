// Names shared by every part of the extension: the debug type, rule ids, the oldest tensor_dap
// Python package this extension works with. No `vscode` import (unit-tested in Node).

export const DEBUG_TYPE = "tensor-dap";
export const EXTENSION_NAME = "tensor-dap";
export const CONFIG_SECTION = "tensorDap";

/** Rule ids: the contract shared with the adapter's breakpoint filters and `tensor-dap check`. */
export const RULE_IDS = [
  "leaves-device",
  "device-mismatch",
  "grad-lost",
  "inplace-saved",
  "broadcast",
  "missing-zero-grad",
  "optimizer-remade",
  "stale-copy",
  "graph-kept",
  "out-of-memory",
  "memory-limit",
  "nan-inf",
] as const;
export type RuleId = (typeof RULE_IDS)[number];

/** What `tensorBreakpoints` may hold besides rule ids. */
export const RULE_GROUPS = ["default", "all"] as const;

/** The oldest `tensor_dap.__version__` this extension speaks to. */
export const MIN_TENSOR_DAP_VERSION = "0.1.0";

/** The PyPI name users install. */
export const PIP_PACKAGE = "tensor-dap";
