#!/usr/bin/env bash
# The browser tests' tools: Debian's Chromium (headless) and Playwright in the project's venv (pinned in
# requirements-browser.txt). Idempotent: seconds when both are there. Kept out of bootstrap.sh so the VM
# image (whose key hashes bootstrap.sh) does not grow a browser it never runs: the web view is served from
# the VM and opened in the user's own browser.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="$here/.venv"
if ! dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed"; then
  echo "[browser] installing Debian's chromium"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi
stamp="$venv/.hpnlab-browser"
want="$(sha256sum <"$here/requirements-browser.txt" | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[browser] installing Playwright (pins in requirements-browser.txt)"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements-browser.txt"
  echo "$want" >"$stamp"
fi
echo "[browser] ready: $(chromium --version 2>/dev/null | head -1), playwright $("$venv/bin/pip" show playwright 2>/dev/null | awk '/^Version/{print $2}')"
