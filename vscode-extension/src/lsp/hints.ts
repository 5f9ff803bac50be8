// The `tensorDap.hints.style` applied to the server's inlay-hint labels on the client side (the
// server is also told the style in initializationOptions). Pure (unit-tested in Node).

import type { HintStyle } from "../common/settings";

const SHAPE = /^(\s*(?:[\w.]+:\s*)?)(\([^)]*\))/;

/** `(64, 10) f32 cuda:0 grad` -> `(64, 10)` for style "shape"; `y: (6,) f32 cpu` -> `y: (6,)`. */
export function styleHintLabel(label: string, style: HintStyle): string {
  if (style !== "shape") {
    return label;
  }
  const match = SHAPE.exec(label);
  return match ? match[1] + match[2] : label;
}
