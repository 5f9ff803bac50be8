import * as assert from "assert";
import { resolveConfiguration, ResolveContext } from "../src/debug/resolve";

const context: ResolveContext = {
  activeLanguage: "python",
  activeFile: "/w/train.py",
  python: "/venv/bin/python",
  defaultRules: ["default"],
};

describe("resolveConfiguration", () => {
  it("F5 without launch.json debugs the current Python file", () => {
    const resolved = resolveConfiguration({}, context);
    assert.ok(resolved.ok);
    assert.deepStrictEqual(resolved.config, {
      type: "tensor-dap",
      request: "launch",
      name: "tensor-dap: current file",
      program: "${file}",
      console: "integratedTerminal",
      justMyCode: true,
      python: "/venv/bin/python",
      tensorBreakpoints: ["default"],
    });
  });

  it("F5 without launch.json and no Python file says what to do", () => {
    const resolved = resolveConfiguration({}, { ...context, activeLanguage: "markdown" });
    assert.ok(!resolved.ok);
    assert.match(resolved.message, /open a Python file/);
  });

  it("keeps what the configuration says", () => {
    const raw = {
      type: "tensor-dap",
      request: "launch",
      name: "mine",
      module: "pkg.train",
      python: "/other/python",
      tensorBreakpoints: ["device-mismatch"],
      args: "--epochs 1",
    };
    const resolved = resolveConfiguration(raw, context);
    assert.ok(resolved.ok);
    assert.deepStrictEqual(resolved.config, raw);
  });

  it("an empty tensorBreakpoints list stays empty (no rule), a missing one comes from settings", () => {
    const base = { type: "tensor-dap", request: "launch", name: "x", program: "a.py" };
    const empty = resolveConfiguration({ ...base, tensorBreakpoints: [] }, context);
    assert.ok(empty.ok && Array.isArray(empty.config.tensorBreakpoints) && empty.config.tensorBreakpoints.length === 0);
    const fromSettings = resolveConfiguration(base, { ...context, defaultRules: ["grad-lost", "nan-inf"] });
    assert.ok(fromSettings.ok);
    assert.deepStrictEqual(fromSettings.config.tensorBreakpoints, ["grad-lost", "nan-inf"]);
  });

  it("refuses unknown rules, a launch without program or module, an attach without connect", () => {
    const bad = resolveConfiguration(
      { type: "tensor-dap", request: "launch", name: "x", program: "a.py", tensorBreakpoints: ["devise-mismatch"] },
      context,
    );
    assert.ok(!bad.ok);
    assert.match(bad.message, /unknown tensor breakpoint "devise-mismatch"/);
    const nothing = resolveConfiguration({ type: "tensor-dap", request: "launch", name: "x" }, context);
    assert.ok(!nothing.ok);
    assert.match(nothing.message, /needs "program" or "module"/);
    const attach = resolveConfiguration({ type: "tensor-dap", request: "attach", name: "a" }, context);
    assert.ok(!attach.ok);
    assert.match(attach.message, /"connect"/);
    const request = resolveConfiguration({ type: "tensor-dap", request: "debug", name: "a" }, context);
    assert.ok(!request.ok);
  });

  it("tensorDap.trace.path goes to the run's environment unless the configuration sets it", () => {
    const base = { type: "tensor-dap", request: "launch", name: "x", program: "a.py", env: { A: "1" } };
    const resolved = resolveConfiguration(base, { ...context, tracePath: "/t/trace.db" });
    assert.ok(resolved.ok);
    assert.deepStrictEqual(resolved.config.env, { A: "1", TENSOR_DAP_TRACE: "/t/trace.db" });
    const own = resolveConfiguration({ ...base, env: { TENSOR_DAP_TRACE: "/mine.db" } }, { ...context, tracePath: "/t/trace.db" });
    assert.ok(own.ok);
    assert.deepStrictEqual(own.config.env, { TENSOR_DAP_TRACE: "/mine.db" });
    const none = resolveConfiguration(base, context);
    assert.ok(none.ok);
    assert.deepStrictEqual(none.config.env, { A: "1" });
  });

  it("attach gets rules but no python", () => {
    const resolved = resolveConfiguration(
      { type: "tensor-dap", request: "attach", name: "a", connect: { host: "127.0.0.1", port: 5678 } },
      context,
    );
    assert.ok(resolved.ok);
    assert.strictEqual(resolved.config.python, undefined);
    assert.deepStrictEqual(resolved.config.tensorBreakpoints, ["default"]);
  });
});
