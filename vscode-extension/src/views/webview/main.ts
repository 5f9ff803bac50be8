// The View Tensor webview: draws what the extension posts (a picture payload, an error, a status)
// on canvases — the heatmap or RGB image scaled up with square pixels, a colour bar, the
// histogram — and shows the value under the mouse. Runs in the webview (DOM), not in Node.

import {
  Bar,
  cellIndex,
  colourAt,
  decodeValues,
  describe,
  drawnNote,
  finiteRange,
  formatNumber,
  heatmapPixels,
  histogramBars,
  imagePixels,
  PictureData,
} from "../picture";

declare function acquireVsCodeApi(): { postMessage(message: unknown): void };

type Message =
  | { type: "picture"; title: string; data: PictureData }
  | { type: "error"; title: string; message: string }
  | { type: "status"; title: string; message: string };

const vscode = acquireVsCodeApi();
const byId = <T extends HTMLElement>(id: string): T => document.getElementById(id) as T;

const MAX_WIDTH = 800;
const MAX_HEIGHT = 360; // leaves room for the histogram below
const STRIP_HEIGHT = 48;

let current: { data: PictureData; values: Float32Array; scale: number; rowScale: number } | undefined;
let bars: Bar[] = [];

function show(id: string, visible: boolean): void {
  byId(id).classList.toggle("hidden", !visible);
}

function drawPicture(data: PictureData, values: Float32Array): void {
  const height = data.height ?? 1;
  const width = data.width ?? 1;
  const canvas = byId<HTMLCanvasElement>("picture");
  const maxWidth = Math.max(200, Math.min(MAX_WIDTH, document.body.clientWidth - 8));
  let scale = Math.max(1, Math.floor(Math.min(maxWidth / width, MAX_HEIGHT / height)));
  let rowScale = scale;
  if (height === 1) {
    rowScale = Math.max(scale, STRIP_HEIGHT); // a vector: a strip tall enough to see
  }
  if (width * scale > maxWidth) {
    scale = maxWidth / width;
  }
  canvas.width = Math.round(width * scale);
  canvas.height = Math.round(height * rowScale);
  const source = document.createElement("canvas");
  source.width = width;
  source.height = height;
  const range = finiteRange(values);
  let note: string;
  let pixels: Uint8ClampedArray;
  if (data.kind === "image") {
    const image = imagePixels(values, range);
    pixels = image.pixels;
    note = image.note;
  } else {
    pixels = heatmapPixels(values, range);
    note = range ? `${formatNumber(range[0])} … ${formatNumber(range[1])} (this slice); NaN magenta, +Inf white, −Inf black` : "no finite values";
  }
  const imageData = new ImageData(new Uint8ClampedArray(pixels), width, height);
  source.getContext("2d")?.putImageData(imageData, 0, 0);
  const ctx = canvas.getContext("2d");
  if (ctx) {
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(source, 0, 0, canvas.width, canvas.height);
  }
  byId("scale").textContent = note;
  show("colourbar", data.kind !== "image");
  current = { data, values, scale, rowScale };
}

function drawColourBar(): void {
  const canvas = byId<HTMLCanvasElement>("colourbar");
  const ctx = canvas.getContext("2d");
  if (!ctx) {
    return;
  }
  for (let x = 0; x < canvas.width; x++) {
    const [r, g, b] = colourAt(x / (canvas.width - 1));
    ctx.fillStyle = `rgb(${r},${g},${b})`;
    ctx.fillRect(x, 0, 1, canvas.height);
  }
}

function drawHistogram(data: PictureData): void {
  const canvas = byId<HTMLCanvasElement>("histogram");
  const ctx = canvas.getContext("2d");
  const histogram = data.histogram;
  if (!ctx) {
    return;
  }
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const style = getComputedStyle(document.body);
  const colour = style.getPropertyValue("--vscode-charts-blue").trim() || "#3794ff";
  const axis = style.getPropertyValue("--vscode-foreground").trim() || "#888";
  const plotHeight = canvas.height - 16;
  bars = histogram ? histogramBars(histogram, canvas.width, plotHeight, byId<HTMLInputElement>("log").checked) : [];
  ctx.fillStyle = colour;
  for (const bar of bars) {
    ctx.fillRect(bar.x, plotHeight - bar.height, Math.max(1, bar.width - 1), bar.height);
  }
  ctx.fillStyle = axis;
  ctx.font = "11px sans-serif";
  if (histogram && histogram.counts.length > 0) {
    ctx.textAlign = "left";
    ctx.fillText(formatNumber(histogram.lo), 0, canvas.height - 3);
    ctx.textAlign = "right";
    ctx.fillText(formatNumber(histogram.hi), canvas.width, canvas.height - 3);
  } else {
    ctx.textAlign = "left";
    ctx.fillText("no finite values", 4, plotHeight / 2);
  }
}

function countsLine(data: PictureData): void {
  const counts = byId("counts");
  counts.textContent = "";
  const add = (label: string, value: string, bad = false): void => {
    const span = document.createElement("span");
    span.textContent = `${label} ${value}   `;
    if (bad) {
      span.className = "bad";
    }
    counts.appendChild(span);
  };
  add("min", formatNumber(data.min));
  add("max", formatNumber(data.max));
  add("NaN", (data.nan ?? 0).toLocaleString("en-US"), (data.nan ?? 0) > 0);
  add("+Inf", (data.posinf ?? 0).toLocaleString("en-US"), (data.posinf ?? 0) > 0);
  add("−Inf", (data.neginf ?? 0).toLocaleString("en-US"), (data.neginf ?? 0) > 0);
}

function render(message: Message): void {
  byId("title").textContent = `View Tensor: ${message.title}`;
  if (message.type === "status") {
    byId("status").textContent = message.message;
    return;
  }
  byId("status").textContent = "";
  if (message.type === "error") {
    byId("error").textContent = message.message;
    show("error", true);
    show("content", false);
    return;
  }
  const data = message.data;
  byId("meta").textContent = describe(data);
  if (data.error) {
    byId("error").textContent = data.error;
    show("error", true);
    show("content", false);
    return;
  }
  show("error", false);
  show("content", true);
  byId("drawn").textContent = drawnNote(data);
  byId("fetched").textContent = `fetched ${new Date().toLocaleTimeString()}`;
  drawPicture(data, decodeValues(data.values ?? ""));
  countsLine(data);
  drawHistogram(data);
}

byId<HTMLCanvasElement>("picture").addEventListener("mousemove", (event) => {
  if (!current) {
    return;
  }
  const { data, values, scale, rowScale } = current;
  const col = Math.floor(event.offsetX / scale);
  const row = Math.floor(event.offsetY / rowScale);
  const width = data.width ?? 1;
  if (col < 0 || row < 0 || col >= width || row >= (data.height ?? 1)) {
    return;
  }
  const channels = data.channels ?? 1;
  const start = (row * width + col) * channels;
  const shown = Array.from(values.slice(start, start + channels), formatNumber).join(", ");
  const mean = (data.block ?? [1, 1]).some((b) => b > 1) ? "mean of " : "";
  byId("hover").textContent = `${mean}${cellIndex(data, row, col)} = ${channels > 1 ? `(${shown})` : shown}`;
});

byId<HTMLCanvasElement>("histogram").addEventListener("mousemove", (event) => {
  const bar = bars.find((b) => event.offsetX >= b.x && event.offsetX < b.x + b.width);
  byId("binHover").textContent = bar ? `[${formatNumber(bar.from)}, ${formatNumber(bar.to)}): ${bar.count.toLocaleString("en-US")}` : "";
});

byId<HTMLInputElement>("log").addEventListener("change", () => {
  if (current) {
    drawHistogram(current.data);
  }
});

window.addEventListener("message", (event: MessageEvent<Message>) => render(event.data));
drawColourBar();
vscode.postMessage({ type: "ready" });
