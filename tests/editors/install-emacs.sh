#!/usr/bin/env bash
# Installs the editor DAP client the tests in tests/editors/ drive: Debian's Emacs (emacs-nox) and
# dap-mode (elpa-dap-mode, with its dependencies lsp-mode, dash, f, s, ht, bui, lsp-treemacs...).
# Idempotent: does nothing when both packages are installed; otherwise one `apt-get update`, then
# `apt-get install --no-install-recommends` of the missing ones. Prints the time it took.
set -euo pipefail
say() { printf '[install-emacs %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
t0=$(date +%s)

missing=()
for pkg in emacs-nox elpa-dap-mode; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    sudo=()
    [ "$(id -u)" = 0 ] || sudo=(sudo)
    say "apt-get install ${missing[*]}"
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
say "emacs-nox and elpa-dap-mode ready ($(($(date +%s) - t0)) s): $(emacs --version | head -n1)"
