// ESLint (flat config): the recommended rules of ESLint and typescript-eslint on the extension's
// TypeScript (src/, test/) and its build scripts. `npm run lint` (no warnings allowed);
// `make ext-test` runs it.
import js from "@eslint/js";
import { defineConfig } from "eslint/config";
import tseslint from "typescript-eslint";

export default defineConfig(
  { ignores: ["dist/", "out/", "node_modules/"] },
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    // the build and preview scripts run under Node
    files: ["**/*.mjs"],
    languageOptions: {
      globals: { console: "readonly", process: "readonly" },
    },
  },
);
