// The Tensor Memory view's data: what the adapter's `tensorMemory` request answers while the
// program is paused (tensor_dap/agent/memory_view.py: live tensor memory per device, by the user
// line that made it, with who holds it), and how each row reads. Pure (unit-tested in Node).

export interface MemoryHolder {
  kind: string; // "local" | "parameter" | "buffer" | "grad" | "optimizer" | "graph" | "none" | "more"
  name: string;
  bytes: number;
}

export interface MemoryLine {
  path: string; // "" when the line was not recorded
  line: number; // 1-based; 0 when not recorded
  op: string; // without a line: what made them, if known ("by optimizer.step()"), else ""
  bytes: number;
  count: number;
  holders: MemoryHolder[];
}

export interface MemoryDevice {
  device: string;
  bytes: number;
  count: number;
  lines: MemoryLine[];
}

export interface MemorySnapshot {
  devices: MemoryDevice[];
}

export const MEMORY_REQUEST = "tensorMemory";

export function memoryRequestArguments(frameId: number | undefined): { frameId?: number } {
  return frameId !== undefined ? { frameId } : {};
}

/** The snapshot, or an error for anything that is not one. */
export function parseSnapshot(body: unknown): MemorySnapshot {
  const devices = (body as { devices?: unknown } | undefined)?.devices;
  if (!Array.isArray(devices)) {
    throw new Error("tensor-dap memory: the adapter's answer has no devices");
  }
  return { devices: devices as MemoryDevice[] };
}

/** "12.0 MiB": bytes as a person reads them (tensor_dap/tensor_text.py's size_text). */
export function sizeText(bytes: number): string {
  let value = bytes;
  for (const unit of ["B", "KiB", "MiB", "GiB"]) {
    if (value < 1024 || unit === "GiB") {
      return unit === "B" ? `${value.toFixed(0)} B` : `${value.toFixed(1)} ${unit}`;
    }
    value /= 1024;
  }
  return `${value.toFixed(1)} GiB`;
}

function tensors(count: number): string {
  return `${count} tensor${count === 1 ? "" : "s"}`;
}

export interface RowText {
  label: string;
  description: string;
  tooltip: string;
}

export function deviceText(device: MemoryDevice): RowText {
  const total = `${sizeText(device.bytes)} · ${tensors(device.count)}`;
  return { label: device.device, description: total, tooltip: `${device.device}: ${total} of live tensors (each storage once)` };
}

/** "train.py:12 mul": the file's name (the path is in the tooltip), or why there is no line. */
export function lineText(row: MemoryLine): RowText {
  const total = `${sizeText(row.bytes)} · ${tensors(row.count)}`;
  if (!row.line || !row.path) {
    const label = `(no line recorded) ${row.op}`.trim();
    return { label, description: total, tooltip: "made unwatched (before the watch, by autograd's engine, in optimizer.step()) or by a line the engine did not sample" };
  }
  const name = row.path.split(/[\\/]/).pop() ?? row.path;
  return { label: `${name}:${row.line} ${row.op}`.trim(), description: total, tooltip: `${row.path}:${row.line} (${row.op})` };
}

const KIND_WORDS: Record<string, string> = {
  local: "variable",
  parameter: "parameter",
  buffer: "buffer",
  grad: "gradient",
  optimizer: "optimizer state",
  graph: "saved for backward",
};

export function holderText(holder: MemoryHolder): RowText {
  const kind = KIND_WORDS[holder.kind] ?? "";
  const size = holder.bytes ? sizeText(holder.bytes) : "";
  const description = [size, kind].filter(Boolean).join(" · ");
  return { label: holder.name, description, tooltip: `${holder.name}${description ? ` — ${description}` : ""}` };
}

/** A failed request, said in the user's terms. */
export function explainMemoryError(message: string): string {
  if (/No module named '?tensor_dap/.test(message)) {
    return "Tensor Memory needs tensor-dap in the Python that runs the program: pip install --upgrade tensor-dap";
  }
  if (/not suspended|Unable to find thread|not paused|pause the program/i.test(message)) {
    return "The program is running; Tensor Memory updates when it pauses.";
  }
  return message;
}
