import * as assert from "assert";
import {
  cellIndex,
  colourAt,
  decodeValues,
  describe as describeTensor,
  drawnNote,
  finiteRange,
  heatColour,
  heatmapPixels,
  histogramBars,
  imagePixels,
  imageScale,
  NAN_COLOUR,
  NEGINF_COLOUR,
  parsePayload,
  PictureData,
  POSINF_COLOUR,
} from "../src/views/picture";

function encode(values: number[]): string {
  const buffer = Buffer.alloc(values.length * 4);
  values.forEach((v, i) => buffer.writeFloatLE(v, i * 4));
  return buffer.toString("base64");
}

describe("picture payload", () => {
  it("decodes little-endian float32 base64, NaN and infinities included", () => {
    const values = decodeValues(encode([0, 1.5, -2, NaN, Infinity, -Infinity]));
    assert.deepStrictEqual(Array.from(values.slice(0, 3)), [0, 1.5, -2]);
    assert.ok(Number.isNaN(values[3]));
    assert.strictEqual(values[4], Infinity);
    assert.strictEqual(values[5], -Infinity);
  });

  it("parses the evaluate result, and says so when it is not a payload", () => {
    const data = parsePayload('{"format":1,"shape":[2],"dtype":"float32","device":"cpu"}');
    assert.deepStrictEqual(data.shape, [2]);
    assert.throws(() => parsePayload("'{\"format\": 1}'"), /did not answer with a picture/);
    assert.throws(() => parsePayload("[1, 2]"), /not a picture/);
  });

  it("maps values onto the colour map, with NaN/Inf colours of their own", () => {
    assert.deepStrictEqual(colourAt(0), [68, 1, 84]);
    assert.deepStrictEqual(colourAt(1), [253, 231, 37]);
    assert.deepStrictEqual(colourAt(2), colourAt(1));
    assert.deepStrictEqual(heatColour(5, 0, 10), colourAt(0.5));
    assert.deepStrictEqual(heatColour(NaN, 0, 1), NAN_COLOUR);
    assert.deepStrictEqual(heatColour(Infinity, 0, 1), POSINF_COLOUR);
    assert.deepStrictEqual(heatColour(-Infinity, 0, 1), NEGINF_COLOUR);
    assert.deepStrictEqual(heatColour(3, 3, 3), colourAt(0.5)); // constant: mid colour
    const pixels = heatmapPixels([0, 10, NaN]);
    assert.deepStrictEqual(Array.from(pixels), [68, 1, 84, 255, 253, 231, 37, 255, 255, 0, 255, 255]);
  });

  it("finite range skips NaN and infinities", () => {
    assert.deepStrictEqual(finiteRange([NaN, 3, -Infinity, 1, Infinity]), [1, 3]);
    assert.strictEqual(finiteRange([NaN]), undefined);
  });

  it("scales images: [0, 1] by 255, [0, 255] as is, anything else stretched", () => {
    assert.deepStrictEqual(imageScale([0, 1]).scale, 255);
    assert.deepStrictEqual(imageScale([0, 200]).scale, 1);
    const stretched = imageScale([-1, 1]);
    assert.deepStrictEqual([stretched.offset, stretched.scale], [-1, 127.5]);
    const { pixels } = imagePixels([0.25, 0.5, 1, NaN, 0, 0], [0, 1]);
    assert.deepStrictEqual(Array.from(pixels), [64, 128, 255, 255, ...NAN_COLOUR, 255]);
  });

  it("lays out histogram bars over the box", () => {
    const bars = histogramBars({ bins: 4, lo: 0, hi: 4, counts: [1, 0, 4, 2] }, 400, 100);
    assert.deepStrictEqual(
      bars.map((b) => [b.x, b.width, b.height, b.from, b.to]),
      [
        [0, 100, 25, 0, 1],
        [100, 100, 0, 1, 2],
        [200, 100, 100, 2, 3],
        [300, 100, 50, 3, 4],
      ],
    );
    const log = histogramBars({ bins: 2, lo: 0, hi: 1, counts: [9, 99] }, 10, 100, true);
    assert.strictEqual(log[1].height, 100);
    assert.strictEqual(log[0].height, 50);
    assert.deepStrictEqual(histogramBars({ bins: 0, lo: 0, hi: 0, counts: [] }, 10, 10), []);
  });

  it("describes what was drawn and which elements a cell covers", () => {
    const data: PictureData = {
      format: 1,
      shape: [8, 3, 100, 200],
      dtype: "float32",
      device: "cuda:0",
      kind: "image",
      layout: "chw",
      slice: "[0, :, :, :]",
      height: 50,
      width: 100,
      channels: 3,
      block: [2, 2],
    };
    assert.strictEqual(describeTensor(data), "(8, 3, 100, 200) float32 cuda:0");
    assert.strictEqual(drawnNote(data), "slice [0, :, :, :]; RGB (C, H, W); 50 × 100, each value the mean of a 2 × 2 block");
    assert.strictEqual(cellIndex(data, 1, 3), "[0, :, 2:4, 6:8]");
    const vector: PictureData = { format: 1, shape: [10], dtype: "int64", device: "cpu", height: 1, width: 10, block: [1, 1] };
    assert.strictEqual(describeTensor(vector), "(10,) int64 cpu");
    assert.strictEqual(cellIndex(vector, 0, 4), "[4]");
    const heat: PictureData = { ...vector, shape: [2, 5, 6], slice: "[0, :, :]", layout: "heatmap" };
    assert.strictEqual(cellIndex(heat, 1, 2), "[0, 1, 2]");
  });
});
