// The View Tensor payload (written by tensor_dap/render/picture.py in the debuggee) and how it is
// turned into pixels: base64 float32 decoding, the heatmap colour map, RGB image scaling, the
// histogram's bars. Pure and DOM-free: used by the webview script and unit-tested in Node.

export interface Histogram {
  bins: number;
  lo: number;
  hi: number;
  counts: number[];
}

export interface PictureData {
  format: number;
  shape: number[];
  dtype: string;
  device: string;
  error?: string;
  kind?: "heatmap" | "image";
  layout?: "heatmap" | "chw" | "hwc";
  slice?: string;
  height?: number;
  width?: number;
  channels?: number;
  /** Block size (rows, columns) each drawn value averages. */
  block?: [number, number];
  /** Base64 of little-endian float32, row-major, channels last. */
  values?: string;
  min?: number | null;
  max?: number | null;
  nan?: number;
  posinf?: number;
  neginf?: number;
  count?: number;
  sampled?: boolean;
  histogram?: Histogram;
  magnitude?: boolean;
}

export type Rgb = [number, number, number];

export const NAN_COLOUR: Rgb = [255, 0, 255];
export const POSINF_COLOUR: Rgb = [255, 255, 255];
export const NEGINF_COLOUR: Rgb = [0, 0, 0];

/** Viridis, sampled at nine points; values in between are interpolated. */
const VIRIDIS: Rgb[] = [
  [68, 1, 84],
  [71, 44, 122],
  [59, 81, 139],
  [44, 113, 142],
  [33, 144, 141],
  [39, 173, 129],
  [92, 200, 99],
  [170, 220, 50],
  [253, 231, 37],
];

/** Parses the evaluate result text; a clear error when it is not a payload. */
export function parsePayload(text: string): PictureData {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    const shown = text.length > 200 ? `${text.slice(0, 200)}…` : text;
    throw new Error(`the debuggee did not answer with a picture: ${shown}`);
  }
  if (!data || typeof data !== "object" || typeof (data as PictureData).format !== "number") {
    throw new Error("the debuggee answered with something that is not a picture");
  }
  return data as PictureData;
}

function base64Bytes(text: string): Uint8Array {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) {
    bytes[i] = binary.charCodeAt(i);
  }
  return bytes;
}

/** The payload's values (little-endian float32, whatever this machine's byte order). */
export function decodeValues(text: string): Float32Array {
  const bytes = base64Bytes(text);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(Math.floor(bytes.byteLength / 4));
  for (let i = 0; i < out.length; i++) {
    out[i] = view.getFloat32(i * 4, true);
  }
  return out;
}

/** Min and max of the finite values, or undefined when there are none. */
export function finiteRange(values: ArrayLike<number>): [number, number] | undefined {
  let lo = Infinity;
  let hi = -Infinity;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (Number.isFinite(v)) {
      lo = Math.min(lo, v);
      hi = Math.max(hi, v);
    }
  }
  return lo <= hi ? [lo, hi] : undefined;
}

/** The colour of `t` in [0, 1] on the colour map (clamped). */
export function colourAt(t: number): Rgb {
  const x = Math.min(1, Math.max(0, Number.isNaN(t) ? 0 : t)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  const a = VIRIDIS[i];
  const b = VIRIDIS[i + 1];
  return [0, 1, 2].map((k) => Math.round(a[k] + (b[k] - a[k]) * f)) as Rgb;
}

/** The colour of one value on a heatmap over [lo, hi]; NaN, +Inf, -Inf have their own. */
export function heatColour(value: number, lo: number, hi: number): Rgb {
  if (Number.isNaN(value)) {
    return NAN_COLOUR;
  }
  if (value === Infinity) {
    return POSINF_COLOUR;
  }
  if (value === -Infinity) {
    return NEGINF_COLOUR;
  }
  return colourAt(hi > lo ? (value - lo) / (hi - lo) : 0.5);
}

/** RGBA pixels (row-major) of a one-channel picture. */
export function heatmapPixels(values: ArrayLike<number>, range?: [number, number]): Uint8ClampedArray {
  const [lo, hi] = range ?? finiteRange(values) ?? [0, 0];
  const out = new Uint8ClampedArray(values.length * 4);
  for (let i = 0; i < values.length; i++) {
    const [r, g, b] = heatColour(values[i], lo, hi);
    out[i * 4] = r;
    out[i * 4 + 1] = g;
    out[i * 4 + 2] = b;
    out[i * 4 + 3] = 255;
  }
  return out;
}

/**
 * How image values map to 0..255: [0, 1] floats are scaled by 255, [0, 255] values are taken as
 * they are, anything else is stretched from its min..max.
 */
export function imageScale(range: [number, number] | undefined): { offset: number; scale: number; note: string } {
  if (!range) {
    return { offset: 0, scale: 1, note: "no finite values" };
  }
  const [lo, hi] = range;
  if (lo >= 0 && hi <= 1) {
    return { offset: 0, scale: 255, note: "values in [0, 1]" };
  }
  if (lo >= 0 && hi <= 255) {
    return { offset: 0, scale: 1, note: "values in [0, 255]" };
  }
  return { offset: lo, scale: hi > lo ? 255 / (hi - lo) : 1, note: `stretched from [${formatNumber(lo)}, ${formatNumber(hi)}]` };
}

/** RGBA pixels of a three-channel picture (values channels last). */
export function imagePixels(values: ArrayLike<number>, range?: [number, number]): { pixels: Uint8ClampedArray; note: string } {
  const { offset, scale, note } = imageScale(range ?? finiteRange(values));
  const count = Math.floor(values.length / 3);
  const pixels = new Uint8ClampedArray(count * 4);
  for (let i = 0; i < count; i++) {
    let bad = false;
    for (let c = 0; c < 3; c++) {
      const v = values[i * 3 + c];
      bad ||= !Number.isFinite(v);
      pixels[i * 4 + c] = Math.round((v - offset) * scale);
    }
    if (bad) {
      pixels.set(NAN_COLOUR, i * 4);
    }
    pixels[i * 4 + 3] = 255;
  }
  return { pixels, note };
}

export interface Bar {
  x: number;
  width: number;
  height: number;
  from: number;
  to: number;
  count: number;
}

/** The histogram's bars in a `width` × `height` box (linear or log counts). */
export function histogramBars(histogram: Histogram, width: number, height: number, log = false): Bar[] {
  const counts = histogram.counts;
  if (counts.length === 0) {
    return [];
  }
  const scaleOf = (n: number): number => (log ? Math.log10(1 + n) : n);
  const top = Math.max(...counts.map(scaleOf), 1e-12);
  const step = (histogram.hi - histogram.lo) / counts.length;
  const barWidth = width / counts.length;
  return counts.map((count, i) => ({
    x: i * barWidth,
    width: barWidth,
    height: count > 0 ? Math.max(1, (scaleOf(count) / top) * height) : 0,
    from: histogram.lo + i * step,
    to: histogram.lo + (i + 1) * step,
    count,
  }));
}

export function formatNumber(value: number | null | undefined): string {
  if (value === null || value === undefined) {
    return "–";
  }
  if (!Number.isFinite(value)) {
    return String(value);
  }
  if (Number.isInteger(value) && Math.abs(value) < 1e15) {
    return String(value);
  }
  return Number(value.toPrecision(6)).toString();
}

/** One line about the tensor: `(300, 400) float32 cpu`. */
export function describe(data: PictureData): string {
  const shape = data.shape.length === 1 ? `(${data.shape[0]},)` : `(${data.shape.join(", ")})`;
  return `${shape} ${data.dtype} ${data.device}`;
}

/** What was drawn: the slice and the downsampling, in words. */
export function drawnNote(data: PictureData): string {
  const parts: string[] = [];
  if (data.slice) {
    parts.push(`slice ${data.slice}`);
  }
  if (data.layout === "chw" || data.layout === "hwc") {
    parts.push(`RGB (${data.layout === "chw" ? "C, H, W" : "H, W, C"})`);
  }
  if (data.magnitude) {
    parts.push("|x| of complex values");
  }
  const [bh, bw] = data.block ?? [1, 1];
  if (bh > 1 || bw > 1) {
    parts.push(`${data.height} × ${data.width}, each value the mean of a ${bh} × ${bw} block`);
  } else {
    parts.push(`${data.height} × ${data.width}, every value`);
  }
  if (data.sampled) {
    parts.push(`histogram and counts over a strided sample of ${(data.count ?? 0).toLocaleString("en-US")} values`);
  }
  return parts.join("; ");
}

/** Which original elements the drawn value at (row, col) covers, as index text. */
export function cellIndex(data: PictureData, row: number, col: number): string {
  const [bh, bw] = data.block ?? [1, 1];
  const range = (i: number, b: number): string => (b > 1 ? `${i * b}:${(i + 1) * b}` : String(i));
  const rank = data.shape.length;
  if (rank <= 1) {
    return `[${range(col, bw)}]`;
  }
  const lead = (data.slice ?? "").replace(/^\[|\]$/g, "").split(", ").filter((p) => p !== "" && p !== ":");
  const cells = data.layout === "chw" ? [":", range(row, bh), range(col, bw)] : data.layout === "hwc" ? [range(row, bh), range(col, bw), ":"] : [range(row, bh), range(col, bw)];
  return `[${[...lead, ...cells].join(", ")}]`;
}
