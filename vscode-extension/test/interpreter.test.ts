import * as assert from "assert";
import {
  chooseInterpreter,
  compareVersions,
  DEFAULT_PYTHON,
  expandPath,
  installCommand,
  interpretProbe,
  parseVersion,
} from "../src/common/interpreter";

describe("chooseInterpreter", () => {
  it("prefers the setting, then the Python extension, then python3", () => {
    assert.deepStrictEqual(chooseInterpreter("/s/python", "/e/python"), { path: "/s/python", source: "setting" });
    assert.deepStrictEqual(chooseInterpreter("", "/e/python"), { path: "/e/python", source: "python-extension" });
    assert.deepStrictEqual(chooseInterpreter("  ", undefined), { path: DEFAULT_PYTHON, source: "default" });
  });

  it("expands ${workspaceFolder}, ~ and ${env:X} in the setting", () => {
    const vars = { workspaceFolder: "/w", home: "/home/u", env: { VENV: "/v" } };
    assert.strictEqual(expandPath("${workspaceFolder}/.venv/bin/python", vars), "/w/.venv/bin/python");
    assert.strictEqual(expandPath("~/py/bin/python", vars), "/home/u/py/bin/python");
    assert.strictEqual(expandPath("${env:VENV}/bin/python", vars), "/v/bin/python");
    assert.strictEqual(expandPath("${userHome}/x", vars), "/home/u/x");
  });
});

describe("version check", () => {
  const interpreter = { path: "/venv/bin/python", source: "setting" as const };

  it("parses and compares versions", () => {
    assert.deepStrictEqual(parseVersion("0.1.0"), [0, 1, 0]);
    assert.deepStrictEqual(parseVersion("1.2.3rc1\n"), [1, 2, 3]);
    assert.deepStrictEqual(parseVersion("1.10"), [1, 10]);
    assert.strictEqual(parseVersion("dev"), undefined);
    assert.strictEqual(compareVersions([0, 1], [0, 1, 0]), 0);
    assert.strictEqual(compareVersions([0, 10], [0, 9, 5]), 1);
    assert.strictEqual(compareVersions([0, 0, 9], [0, 1]), -1);
  });

  it("accepts the minimum and newer", () => {
    assert.deepStrictEqual(interpretProbe(interpreter, { exitCode: 0, stdout: "0.1.0\n", stderr: "" }, "0.1.0"), {
      ok: true,
      version: "0.1.0",
    });
    assert.ok(interpretProbe(interpreter, { exitCode: 0, stdout: "0.2\n", stderr: "" }, "0.1.0").ok);
  });

  it("a missing tensor_dap gives the install command", () => {
    const result = interpretProbe(interpreter, {
      exitCode: 1,
      stdout: "",
      stderr: "Traceback (most recent call last):\n  File \"<string>\", line 1\nModuleNotFoundError: No module named 'tensor_dap'\n",
    });
    assert.ok(!result.ok);
    assert.strictEqual(result.problem, "not-installed");
    assert.strictEqual(result.fix, "/venv/bin/python -m pip install --upgrade tensor-dap");
    assert.match(result.message, /not installed in \/venv\/bin\/python \(from the tensorDap.python setting\)/);
    assert.ok(result.message.includes(result.fix!));
  });

  it("an old tensor_dap says which version and how to upgrade", () => {
    const result = interpretProbe(interpreter, { exitCode: 0, stdout: "0.0.9\n", stderr: "" }, "0.1.0");
    assert.ok(!result.ok);
    assert.strictEqual(result.problem, "too-old");
    assert.match(result.message, /0\.0\.9 .* older than 0\.1\.0/);
    assert.match(result.message, /pip install --upgrade tensor-dap/);
  });

  it("a missing interpreter says where it came from", () => {
    const result = interpretProbe({ path: "python3", source: "default" }, { spawnError: "not found", exitCode: null, stdout: "", stderr: "" });
    assert.ok(!result.ok);
    assert.strictEqual(result.problem, "no-python");
    assert.match(result.message, /"python3" \(no tensorDap.python setting and no Python extension interpreter\): not found/);
    assert.match(result.message, /tensorDap\.python/);
  });

  it("a broken import shows its last line", () => {
    const result = interpretProbe(interpreter, { exitCode: 1, stdout: "", stderr: "ImportError: libtorch.so missing\n" });
    assert.ok(!result.ok);
    assert.strictEqual(result.problem, "broken");
    assert.match(result.message, /ImportError: libtorch.so missing/);
  });

  it("quotes interpreters with blanks in the fix command", () => {
    assert.strictEqual(installCommand("/My Envs/python"), '"/My Envs/python" -m pip install --upgrade tensor-dap');
  });
});
